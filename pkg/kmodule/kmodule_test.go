package kmodule_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/kmodule"
)

type pair struct {
	keyPEM, certDER []byte
	cert            *x509.Certificate
}

func newPair(t testing.TB, cn string, ec bool) pair {
	t.Helper()
	var key any
	var pub any
	if ec {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key, pub = k, &k.PublicKey
	} else {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		key, pub = k, &k.PublicKey
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return pair{keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), certDER: der, cert: c}
}

func module() []byte { return fakehost.KernelObject("2.8.0", "6.1.0-28-amd64") }

func TestReadInfo(t *testing.T) {
	info, err := kmodule.ReadInfo(module())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "tenstorrent" || info.Version != "2.8.0" || info.Release() != "6.1.0-28-amd64" ||
		!strings.HasPrefix(info.Vermagic, "6.1.0-28-amd64 SMP") || info.SrcVersion == "" {
		t.Errorf("ReadInfo = %+v", info)
	}
	// A field stated twice could be read differently by the kernel.
	twice := fakehost.ELFModule([]string{"version=2.8.0", "name=tenstorrent", "vermagic=6.1.0-28-amd64 SMP ", "version=9.9.9"})
	if _, err := kmodule.ReadInfo(twice); err == nil {
		t.Error("a module stating its version twice was read")
	}
	for _, bad := range [][]byte{nil, []byte("FAKEKO name=tenstorrent version=2.8.0"), []byte("\x7fELF")} {
		if _, err := kmodule.ReadInfo(bad); err == nil {
			t.Errorf("ReadInfo(%q) read a module", bad)
		}
	}
}

func TestSignVerify(t *testing.T) {
	admin, other := newPair(t, "admin", false), newPair(t, "other", false)
	s, err := kmodule.NewSigner(admin.keyPEM, admin.certDER)
	if err != nil {
		t.Fatal(err)
	}
	ko := module()
	signed, err := s.Sign(ko)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(signed, ko) || !bytes.HasSuffix(signed, []byte(kmodule.Marker)) {
		t.Fatal("not module ‖ signature ‖ marker")
	}
	again, _ := s.Sign(ko)
	if !bytes.Equal(signed, again) {
		t.Error("two signatures of one module differ (RSA PKCS#1 v1.5 is deterministic)")
	}
	if err := kmodule.Verify(signed, admin.cert); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if info, err := kmodule.ReadInfo(signed); err != nil || info.Version != "2.8.0" {
		t.Errorf("ReadInfo of the signed module: %+v %v", info, err)
	}
	if err := kmodule.Verify(signed, other.cert); !errors.Is(err, kmodule.ErrOtherKey) {
		t.Errorf("Verify against another certificate: %v", err)
	}
	if err := kmodule.Verify(ko, admin.cert); !errors.Is(err, kmodule.ErrUnsigned) {
		t.Errorf("Verify of the unsigned module: %v", err)
	}
	if _, err := s.Sign(signed); err == nil {
		t.Error("a signed module was signed again")
	}
	// The fake kernel (internal/fakehost, written apart from this package
	// from kernel/module/signing.c) accepts it too.
	if err := fakehost.CheckModuleSignature(signed, admin.certDER); err != nil {
		t.Errorf("the fake kernel: %v", err)
	}
}

// Every byte of the module and of the signature value, and every byte of
// struct module_signature, changed: Verify refuses each.
func TestVerifyRefusesEveryMutation(t *testing.T) {
	admin := newPair(t, "admin", false)
	s, err := kmodule.NewSigner(admin.keyPEM, admin.certDER)
	if err != nil {
		t.Fatal(err)
	}
	ko := module()
	signed, err := s.Sign(ko)
	if err != nil {
		t.Fatal(err)
	}
	trailer := len(signed) - len(kmodule.Marker) - 12
	sigValue := trailer - 256 // the RSA-2048 signature ends the PKCS#7
	var positions []int
	for i := range ko {
		positions = append(positions, i)
	}
	for i := sigValue; i < len(signed); i++ {
		positions = append(positions, i)
	}
	for _, i := range positions {
		m := bytes.Clone(signed)
		m[i] ^= 0x01
		if err := kmodule.Verify(m, admin.cert); err == nil {
			t.Errorf("byte %d (of %d) changed: still verifies", i, len(signed))
		}
	}
	if err := kmodule.Verify(append(bytes.Clone(signed), 0), admin.cert); !errors.Is(err, kmodule.ErrUnsigned) {
		t.Errorf("a byte after the marker: %v", err)
	}
}

func TestNewSignerRefuses(t *testing.T) {
	admin, other, ec := newPair(t, "admin", false), newPair(t, "other", false), newPair(t, "ec", true)
	for name, c := range map[string]struct{ key, cert []byte }{
		"key of another certificate": {other.keyPEM, admin.certDER},
		"ECDSA key":                  {ec.keyPEM, ec.certDER},
		"certificate as key":         {pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: admin.certDER}), admin.certDER},
		"encrypted key":              {pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}), admin.certDER},
		"no certificate":             {admin.keyPEM, []byte("nope")},
	} {
		_, err := kmodule.NewSigner(c.key, c.cert)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), string(admin.keyPEM[30:60])) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
	// PEM certificate and PKCS#1 key are as good as DER and PKCS#8.
	k, _ := x509.ParsePKCS8PrivateKey(pemBody(admin.keyPEM))
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k.(*rsa.PrivateKey))})
	if _, err := kmodule.NewSigner(pkcs1, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: admin.certDER})); err != nil {
		t.Errorf("PKCS#1 key, PEM certificate: %v", err)
	}
}

func pemBody(b []byte) []byte { blk, _ := pem.Decode(b); return blk.Bytes }
