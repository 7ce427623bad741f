package kmodule

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Signer signs modules as scripts/sign-file does with SHA-256: the key
// never leaves the process that loaded it (kubectl tt, on the operator's
// machine).
type Signer struct {
	key  *rsa.PrivateKey
	cert *x509.Certificate
}

// NewSigner takes a PEM private key (PKCS#8 or PKCS#1, as openssl writes
// MOK.priv) and its certificate (PEM or DER, as MOK.der). Errors never
// quote the key.
func NewSigner(keyPEM, cert []byte) (*Signer, error) {
	c, err := ParseCertificate(cert)
	if err != nil {
		return nil, fmt.Errorf("the certificate: %w", err)
	}
	k, err := parseRSAKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the private key: %w", err)
	}
	pub, ok := c.PublicKey.(*rsa.PublicKey)
	if !ok || !pub.Equal(&k.PublicKey) {
		return nil, errors.New("the private key is not the certificate's: the kernel would reject every module it signs")
	}
	return &Signer{key: k, cert: c}, nil
}

// Certificate is the signer's certificate (DER), which nodes get to check
// a signature against; never the key.
func (s *Signer) Certificate() []byte { return s.cert.Raw }

// CertSHA256 is the hex SHA-256 of the certificate (DER): the signer's
// identity in rollbook's records and argv.
func (s *Signer) CertSHA256() string { return CertSHA256(s.cert.Raw) }

// CertSHA256 is the hex SHA-256 of a DER certificate.
func CertSHA256(der []byte) string { sum := sha256.Sum256(der); return hex.EncodeToString(sum[:]) }

// Sign appends a signature to an unsigned module, byte for byte what
// `sign-file sha256 KEY CERT MODULE` appends (RSA PKCS#1 v1.5 is
// deterministic). A module that is signed already is refused: sign-file
// would sign the old signature too, and the kernel reads only the last.
func (s *Signer) Sign(ko []byte) ([]byte, error) {
	if _, _, signed, err := Split(ko); err != nil || signed {
		return nil, errors.New("the module carries a signature already")
	}
	digest := sha256.Sum256(ko)
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, digest[:])
	if err != nil {
		return nil, err
	}
	sha256Alg := pkix.AlgorithmIdentifier{Algorithm: oidSHA256} // no parameters, as OpenSSL writes SHA-2
	si, err := asn1.Marshal(signerInfoOut{Version: 1,
		SID:                issuerAndSerial{Issuer: asn1.RawValue{FullBytes: s.cert.RawIssuer}, Serial: s.cert.SerialNumber},
		DigestAlgorithm:    sha256Alg,
		SignatureAlgorithm: pkix.AlgorithmIdentifier{Algorithm: oidRSA, Parameters: asn1.NullRawValue},
		Signature:          sig})
	if err != nil {
		return nil, err
	}
	sd, err := asn1.Marshal(signedData{Version: 1, DigestAlgorithms: []pkix.AlgorithmIdentifier{sha256Alg},
		EncapContentInfo: encapContent{EContentType: oidData}, SignerInfos: []asn1.RawValue{{FullBytes: si}}})
	if err != nil {
		return nil, err
	}
	// A RawValue is written as it is (encoding/asn1 adds no explicit tag to
	// one), so the [0] is spelled out.
	p7, err := asn1.Marshal(contentInfo{ContentType: oidSignedData,
		Content: asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: sd}})
	if err != nil {
		return nil, err
	}
	return appendSignature(ko, p7), nil
}

// ParseCertificate reads one X.509 certificate, PEM or DER, as sign-file
// and the kernel's keyrings take it.
func ParseCertificate(b []byte) (*x509.Certificate, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM %s, not a certificate", strings.ToLower(blk.Type))
		}
		b = blk.Bytes
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("not an X.509 certificate (PEM or DER): %v", err)
	}
	return c, nil
}

func parseRSAKey(b []byte) (*rsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("not a PEM private key")
	}
	if blk.Headers["Proc-Type"] != "" {
		return nil, errors.New("the key is encrypted; give an unencrypted PEM key (openssl pkey -in KEY -out PLAIN)")
	}
	var k any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "ENCRYPTED PRIVATE KEY":
		return nil, errors.New("the key is encrypted; give an unencrypted PEM key (openssl pkey -in KEY -out PLAIN)")
	default:
		return nil, fmt.Errorf("a PEM %s, not a private key", strings.ToLower(blk.Type))
	}
	if err != nil {
		return nil, errors.New("unreadable private key (PKCS#8 or PKCS#1 PEM)")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T key: module signing keys here are RSA (shim's Machine Owner Keys are)", k)
	}
	return rk, nil
}
