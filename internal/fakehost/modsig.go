package fakehost

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"
)

// Module signatures as the kernel checks them (kernel/module/signing.c,
// Documentation/admin-guide/module-signing.rst): the module's bytes, a
// detached PKCS#7 (CMS) SignedData over them, struct module_signature and
// the marker. The kernel verifies the PKCS#7 against its trusted keys
// (built-in, secondary, and on distribution kernels the platform/MOK keys).

// ModuleSigMarker ends a signed module (MODULE_SIG_STRING).
const ModuleSigMarker = "~Module signature appended~\n"

// moduleSigInfoLen is sizeof(struct module_signature): algo, hash, id_type,
// signer_len, key_id_len, 3 pad bytes, __be32 sig_len.
const moduleSigInfoLen = 12

// pkeyIDPKCS7 is id_type PKEY_ID_PKCS7, the only kind the kernel accepts.
const pkeyIDPKCS7 = 2

// Why the kernel rejects a module signature; the errno decides what
// finit_module returns.
var (
	// errNoSig is ENODATA: no signature appended.
	errNoSig = errors.New("unsigned module")
	// errNoKey is ENOKEY: signed, but by no trusted key.
	errNoKey = errors.New("module with unavailable key")
	// errBadSig is EKEYREJECTED or EBADMSG: a malformed signature or one
	// that does not match the module; refused whatever the policy.
	errBadSig = errors.New("bad module signature")
	// errNoPkg is ENOPKG: a signature that is not PKCS#7 (mod_check_sig);
	// like ENOKEY, refused only under enforcement or lockdown.
	errNoPkg = errors.New("module with unsupported crypto")
)

// splitModuleSig cuts a signed module into its content and PKCS#7
// signature; errNoSig without the marker.
func splitModuleSig(b []byte) (content, p7 []byte, err error) {
	if !bytes.HasSuffix(b, []byte(ModuleSigMarker)) {
		return b, nil, errNoSig
	}
	b = b[:len(b)-len(ModuleSigMarker)]
	if len(b) < moduleSigInfoLen {
		return nil, nil, fmt.Errorf("%w: truncated struct module_signature", errBadSig)
	}
	info := b[len(b)-moduleSigInfoLen:]
	b = b[:len(b)-moduleSigInfoLen]
	if n := binary.BigEndian.Uint32(info[8:]); uint64(n) >= uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: sig_len %d exceeds the module", errBadSig, n)
	}
	if info[2] != pkeyIDPKCS7 {
		return nil, nil, fmt.Errorf("%w: id_type %d is not PKCS#7", errNoPkg, info[2])
	}
	if info[0] != 0 || info[1] != 0 || info[3] != 0 || info[4] != 0 || info[5]|info[6]|info[7] != 0 {
		return nil, nil, fmt.Errorf("%w: PKCS#7 signature with non-zero algo/hash/signer/key_id fields", errBadSig)
	}
	n := binary.BigEndian.Uint32(info[8:])
	if uint64(n) > uint64(len(b)) || n == 0 {
		return nil, nil, fmt.Errorf("%w: sig_len %d exceeds the module", errBadSig, n)
	}
	return b[:len(b)-int(n)], b[len(b)-int(n):], nil
}

// stripModuleSig is b without a trailing signature (what modinfo and the
// module loader parse).
func stripModuleSig(b []byte) []byte {
	if c, _, err := splitModuleSig(b); err == nil {
		return c
	}
	return b
}

// checkModuleSig is the kernel's mod_verify_sig: nil when a trusted
// certificate's key signed b.
func checkModuleSig(b []byte, trusted []*x509.Certificate) error {
	content, p7, err := splitModuleSig(b)
	if err != nil {
		return err
	}
	signers, err := parsePKCS7(p7)
	if err != nil {
		return fmt.Errorf("%w: %v", errBadSig, err)
	}
	for _, s := range signers {
		for _, c := range trusted {
			if !s.names(c) {
				continue
			}
			if err := s.verify(c, content); err != nil {
				return fmt.Errorf("%w: %v", errBadSig, err)
			}
			return nil
		}
	}
	return errNoKey
}

// ParseCertificates reads PEM (any number of CERTIFICATE blocks) or one DER
// certificate, as sign-file and the kernel's keyrings take them.
func ParseCertificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) > 0 {
		return out, nil
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("neither PEM nor DER X.509: %v", err)
	}
	return []*x509.Certificate{c}, nil
}

var (
	oidSignedData    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidData          = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidMessageDigest = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
	oidRSA           = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	hashOIDs         = map[string]crypto.Hash{
		"1.3.14.3.2.26":          crypto.SHA1,
		"2.16.840.1.101.3.4.2.4": crypto.SHA224,
		"2.16.840.1.101.3.4.2.1": crypto.SHA256,
		"2.16.840.1.101.3.4.2.2": crypto.SHA384,
		"2.16.840.1.101.3.4.2.3": crypto.SHA512,
	}
	hashNames = map[string]crypto.Hash{"sha1": crypto.SHA1, "sha224": crypto.SHA224, "sha256": crypto.SHA256,
		"sha384": crypto.SHA384, "sha512": crypto.SHA512}
)

// signer is one SignerInfo of a SignedData.
type signer struct {
	issuer, serial, skid []byte // issuerAndSerialNumber, or subjectKeyIdentifier
	hash                 crypto.Hash
	signedAttrs          []byte // DER as a SET, nil without
	signature            []byte
}

type issuerAndSerial struct {
	Issuer asn1.RawValue
	Serial *big.Int
}

func (s signer) names(c *x509.Certificate) bool {
	if s.skid != nil {
		return bytes.Equal(s.skid, c.SubjectKeyId)
	}
	return bytes.Equal(s.issuer, c.RawIssuer) && new(big.Int).SetBytes(s.serial).Cmp(c.SerialNumber) == 0
}

// verify checks the signature with c's key: over the content's digest, or
// over the signed attributes whose messageDigest is that digest.
func (s signer) verify(c *x509.Certificate, content []byte) error {
	if !s.hash.Available() {
		return fmt.Errorf("unsupported digest")
	}
	h := s.hash.New()
	h.Write(content)
	digest := h.Sum(nil)
	signed := content
	if s.signedAttrs != nil {
		md, err := messageDigest(s.signedAttrs)
		if err != nil {
			return err
		}
		if !bytes.Equal(md, digest) {
			return fmt.Errorf("message digest doesn't match the module")
		}
		signed = s.signedAttrs
		h = s.hash.New()
		h.Write(signed)
		digest = h.Sum(nil)
	}
	switch pub := c.PublicKey.(type) {
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(pub, s.hash, digest, s.signature)
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(pub, digest, s.signature) {
			return fmt.Errorf("ECDSA signature does not verify")
		}
		return nil
	}
	return fmt.Errorf("unsupported public key %T", c.PublicKey)
}

func messageDigest(set []byte) ([]byte, error) {
	var attrs []struct {
		Type   asn1.ObjectIdentifier
		Values asn1.RawValue `asn1:"set"`
	}
	if _, err := asn1.UnmarshalWithParams(set, &attrs, "set"); err != nil {
		return nil, fmt.Errorf("signed attributes: %v", err)
	}
	for _, a := range attrs {
		if a.Type.Equal(oidMessageDigest) {
			var md []byte
			if _, err := asn1.Unmarshal(a.Values.Bytes, &md); err != nil {
				return nil, err
			}
			return md, nil
		}
	}
	return nil, fmt.Errorf("signed attributes without messageDigest")
}

// elements splits DER into its top-level elements.
func elements(b []byte) ([]asn1.RawValue, error) {
	var out []asn1.RawValue
	for len(b) > 0 {
		var v asn1.RawValue
		rest, err := asn1.Unmarshal(b, &v)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		b = rest
	}
	return out, nil
}

// parsePKCS7 reads the SignerInfos of a detached SignedData.
func parsePKCS7(der []byte) ([]signer, error) {
	var ci struct {
		Type    asn1.ObjectIdentifier
		Content asn1.RawValue // [0] EXPLICIT SignedData
	}
	if rest, err := asn1.Unmarshal(der, &ci); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("not a PKCS#7 ContentInfo (%v)", err)
	}
	if !ci.Type.Equal(oidSignedData) {
		return nil, fmt.Errorf("content type %v is not signedData", ci.Type)
	}
	inner, err := elements(ci.Content.Bytes)
	if err != nil || ci.Content.Class != asn1.ClassContextSpecific || ci.Content.Tag != 0 || len(inner) != 1 {
		return nil, fmt.Errorf("malformed ContentInfo (%v)", err)
	}
	sd, err := elements(inner[0].Bytes)
	if err != nil || len(sd) < 4 {
		return nil, fmt.Errorf("malformed SignedData (%v)", err)
	}
	infos := sd[len(sd)-1]
	if infos.Tag != asn1.TagSet {
		return nil, fmt.Errorf("SignedData without signerInfos")
	}
	list, err := elements(infos.Bytes)
	if err != nil {
		return nil, err
	}
	var out []signer
	for _, si := range list {
		f, err := elements(si.Bytes)
		if err != nil || len(f) < 5 {
			return nil, fmt.Errorf("malformed SignerInfo (%v)", err)
		}
		var s signer
		switch sid := f[1]; {
		case sid.Class == asn1.ClassContextSpecific && sid.Tag == 0:
			s.skid = sid.Bytes
		default:
			var ias issuerAndSerial
			if _, err := asn1.Unmarshal(sid.FullBytes, &ias); err != nil {
				return nil, fmt.Errorf("signer identifier: %v", err)
			}
			s.issuer, s.serial = ias.Issuer.FullBytes, ias.Serial.Bytes()
		}
		var alg pkix.AlgorithmIdentifier
		if _, err := asn1.Unmarshal(f[2].FullBytes, &alg); err != nil {
			return nil, err
		}
		s.hash = hashOIDs[alg.Algorithm.String()]
		i := 3
		if f[i].Class == asn1.ClassContextSpecific && f[i].Tag == 0 {
			// Signed over as a SET (tag 0x31), not as the [0] it is stored as.
			s.signedAttrs = append([]byte{0x31}, f[i].FullBytes[1:]...)
			i++
		}
		if len(f) < i+2 {
			return nil, fmt.Errorf("SignerInfo without a signature")
		}
		if _, err := asn1.Unmarshal(f[i+1].FullBytes, &s.signature); err != nil {
			return nil, fmt.Errorf("signature: %v", err)
		}
		out = append(out, s)
	}
	return out, nil
}

// signModule appends a signature as the kernel's sign-file does (detached
// PKCS#7, no certificates, no signed attributes, issuer and serial number).
func signModule(content []byte, key crypto.Signer, cert *x509.Certificate, hash crypto.Hash) ([]byte, error) {
	h := hash.New()
	h.Write(content)
	sig, err := key.Sign(rand.Reader, h.Sum(nil), hash)
	if err != nil {
		return nil, err
	}
	var hashOID asn1.ObjectIdentifier
	for o, hh := range hashOIDs {
		if hh == hash {
			for _, p := range strings.Split(o, ".") {
				n, _ := strconv.Atoi(p)
				hashOID = append(hashOID, n)
			}
		}
	}
	// As sign-file writes it: the digest algorithm without parameters.
	digestAlg := pkix.AlgorithmIdentifier{Algorithm: hashOID}
	type sInfo struct {
		Version   int
		SID       issuerAndSerial
		DigestAlg pkix.AlgorithmIdentifier
		SigAlg    pkix.AlgorithmIdentifier
		Signature []byte
	}
	type sData struct {
		Version     int
		DigestAlgs  []pkix.AlgorithmIdentifier `asn1:"set"`
		Content     struct{ Type asn1.ObjectIdentifier }
		SignerInfos []sInfo `asn1:"set"`
	}
	sd := sData{Version: 1, DigestAlgs: []pkix.AlgorithmIdentifier{digestAlg}}
	sd.Content.Type = oidData
	sd.SignerInfos = []sInfo{{Version: 1, SID: issuerAndSerial{Issuer: asn1.RawValue{FullBytes: cert.RawIssuer}, Serial: cert.SerialNumber},
		DigestAlg: digestAlg, SigAlg: pkix.AlgorithmIdentifier{Algorithm: oidRSA, Parameters: asn1.NullRawValue}, Signature: sig}}
	inner, err := asn1.Marshal(sd)
	if err != nil {
		return nil, err
	}
	p7, err := asn1.Marshal(struct {
		Type    asn1.ObjectIdentifier
		Content asn1.RawValue
	}{oidSignedData, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: inner}})
	if err != nil {
		return nil, err
	}
	info := make([]byte, moduleSigInfoLen)
	info[2] = pkeyIDPKCS7
	binary.BigEndian.PutUint32(info[8:], uint32(len(p7)))
	out := append(append(append(append([]byte(nil), content...), p7...), info...), ModuleSigMarker...)
	return out, nil
}

// signFile is the kernel's scripts/sign-file: sign-file HASH KEY CERT
// MODULE [DEST], the key PEM, the certificate PEM or DER; the module is
// signed in place unless DEST is given.
func signFile(t *tool) int {
	args := nonFlags(t.args)
	if len(args) < 4 || len(args) > 5 {
		return t.errorf(2, "Usage: scripts/sign-file [-dp] <hash algo> <key> <x509> <module> [<dest>]")
	}
	hash, ok := hashNames[args[0]]
	if !ok {
		return t.errorf(1, "Digest algorithm %s not supported", args[0])
	}
	read := func(p string) ([]byte, error) {
		q, err := t.path(p)
		if err != nil {
			return nil, err
		}
		return os.ReadFile(q)
	}
	kb, err := read(args[1])
	if err != nil {
		return t.errorf(1, "%s: %v", args[1], err)
	}
	key, err := parsePrivateKey(kb)
	if err != nil {
		return t.errorf(1, "%s: %v", args[1], err)
	}
	cb, err := read(args[2])
	if err != nil {
		return t.errorf(1, "%s: %v", args[2], err)
	}
	certs, err := ParseCertificates(cb)
	if err != nil {
		return t.errorf(1, "%s: %v", args[2], err)
	}
	mod, err := read(args[3])
	if err != nil {
		return t.errorf(1, "%s: %v", args[3], err)
	}
	out, err := signModule(mod, key, certs[0], hash)
	if err != nil {
		return t.errorf(1, "%v", err)
	}
	dest := args[3]
	if len(args) == 5 {
		dest = args[4]
	}
	q, err := t.path(dest)
	if err != nil {
		return t.errorf(1, "%v", err)
	}
	if err := os.WriteFile(q, out, 0o644); err != nil {
		return t.errorf(1, "%v", err)
	}
	return 0
}

func parsePrivateKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("not a PEM private key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("unsupported private key (%s)", blk.Type)
}
