package kmodule

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
)

// Why Verify refuses a module.
var (
	// ErrUnsigned: no signature appended (the kernel's ENODATA).
	ErrUnsigned = errors.New("the module is not signed")
	// ErrOtherKey: signed, but not by the certificate's key (ENOKEY).
	ErrOtherKey = errors.New("the module is signed by another key")
	// ErrBadSignature: a signature by that key that does not match the
	// module's bytes (EKEYREJECTED, EBADMSG).
	ErrBadSignature = errors.New("the module's signature does not match its bytes")
)

// Verify checks that ko carries a signature by cert's key over its
// content, as the kernel's mod_verify_sig does with cert as its only
// trusted key.
func Verify(ko []byte, cert *x509.Certificate) error {
	content, p7, signed, err := Split(ko)
	if err != nil {
		return err
	}
	if !signed {
		return ErrUnsigned
	}
	var ci contentInfo
	if rest, err := asn1.Unmarshal(p7, &ci); err != nil || len(rest) > 0 || !ci.ContentType.Equal(oidSignedData) {
		return fmt.Errorf("%w: not a PKCS#7 SignedData", ErrMalformed)
	}
	var sd signedData
	if rest, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil || len(rest) > 0 {
		return fmt.Errorf("%w: SignedData: %v", ErrMalformed, err)
	}
	if len(sd.EncapContentInfo.EContent.Bytes) > 0 || !sd.EncapContentInfo.EContentType.Equal(oidData) {
		return fmt.Errorf("%w: not a detached signature over data", ErrMalformed)
	}
	for _, raw := range sd.SignerInfos {
		var si signerInfoIn
		if rest, err := asn1.Unmarshal(raw.FullBytes, &si); err != nil || len(rest) > 0 {
			return fmt.Errorf("%w: SignerInfo: %v", ErrMalformed, err)
		}
		if !names(si.SID, cert) {
			continue
		}
		return si.verify(cert, content)
	}
	return ErrOtherKey
}

// names reports a SignerIdentifier that is cert: by issuer and serial
// number, or by subject key identifier ([0] IMPLICIT OCTET STRING).
func names(sid asn1.RawValue, cert *x509.Certificate) bool {
	if sid.Class == asn1.ClassContextSpecific && sid.Tag == 0 {
		return len(cert.SubjectKeyId) > 0 && bytes.Equal(sid.Bytes, cert.SubjectKeyId)
	}
	var ias issuerAndSerial
	if rest, err := asn1.Unmarshal(sid.FullBytes, &ias); err != nil || len(rest) > 0 || ias.Serial == nil {
		return false
	}
	return bytes.Equal(ias.Issuer.FullBytes, cert.RawIssuer) && ias.Serial.Cmp(cert.SerialNumber) == 0
}

func (si signerInfoIn) verify(cert *x509.Certificate, content []byte) error {
	hash, ok := hashOf(si.DigestAlgorithm.Algorithm)
	if !ok {
		return fmt.Errorf("%w: digest %v", ErrBadSignature, si.DigestAlgorithm.Algorithm)
	}
	h := hash.New()
	h.Write(content)
	digest := h.Sum(nil)
	if len(si.SignedAttrs.FullBytes) > 0 {
		// With signed attributes the signature is over them (DER as a SET,
		// not the [0] they are stored as), and their messageDigest is the
		// content's.
		md, err := messageDigest(si.SignedAttrs.Bytes)
		if err != nil {
			return err
		}
		if !bytes.Equal(md, digest) {
			return ErrBadSignature
		}
		set := append([]byte{0x31}, si.SignedAttrs.FullBytes[1:]...)
		h = hash.New()
		h.Write(set)
		digest = h.Sum(nil)
	}
	switch pub := cert.PublicKey.(type) {
	case *rsa.PublicKey:
		if !si.SignatureAlgorithm.Algorithm.Equal(oidRSA) {
			return fmt.Errorf("%w: signature algorithm %v for an RSA key", ErrBadSignature, si.SignatureAlgorithm.Algorithm)
		}
		if rsa.VerifyPKCS1v15(pub, hash, digest, si.Signature) != nil {
			return ErrBadSignature
		}
		return nil
	case *ecdsa.PublicKey:
		a := si.SignatureAlgorithm.Algorithm
		if !a.Equal(oidECDSA256) && !a.Equal(oidECDSA384) && !a.Equal(oidECDSA512) {
			return fmt.Errorf("%w: signature algorithm %v for an ECDSA key", ErrBadSignature, a)
		}
		if !ecdsa.VerifyASN1(pub, digest, si.Signature) {
			return ErrBadSignature
		}
		return nil
	}
	return fmt.Errorf("%w: a %T key", ErrBadSignature, cert.PublicKey)
}

func messageDigest(attrs []byte) ([]byte, error) {
	for len(attrs) > 0 {
		var a attribute
		rest, err := asn1.Unmarshal(attrs, &a)
		if err != nil {
			return nil, fmt.Errorf("%w: signed attributes: %v", ErrMalformed, err)
		}
		attrs = rest
		if a.Type.Equal(oidMsgDigest) {
			var md []byte
			if _, err := asn1.Unmarshal(a.Values.Bytes, &md); err != nil {
				return nil, fmt.Errorf("%w: messageDigest: %v", ErrMalformed, err)
			}
			return md, nil
		}
	}
	return nil, fmt.Errorf("%w: signed attributes without messageDigest", ErrMalformed)
}
