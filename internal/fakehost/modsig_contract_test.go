package fakehost

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testSigner is a module-signing key pair as an admin makes one for MOK
// enrolment: a PEM private key and its self-signed certificate.
type testSigner struct {
	keyPEM, certPEM, certDER []byte
}

func newTestSigner(t testing.TB, cn string) testSigner {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testSigner{keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), certDER: der}
}

func put(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The kernel's sign-file of the real-host rootfs (Debian's, reached through
// /lib/modules/<kver>/build/scripts) and the fake one sign the same module
// with the hash the headers name; the fake kernel accepts what either
// signed with a key it trusts, and refuses, under module.sig_enforce, a
// module signed by another key, an unsigned one and a tampered one, as
// kernel/module/signing.c does.
func TestContractSignFileAndTheKernelsSignatureCheck(t *testing.T) {
	fake, real, kver := worlds(t)
	enrolled, other := newTestSigner(t, "enrolled MOK"), newTestSigner(t, "someone else")
	module := KernelObject("2.9.0", kver)
	signFile := "/lib/modules/" + kver + "/build/scripts/sign-file"
	signed := map[string]map[string][]byte{}
	both(fake, real, func(w world) {
		hash := ""
		for _, f := range []string{"include/config/auto.conf", ".config"} {
			p, _ := (&tool{root: w.root, chrooted: true}).path("/lib/modules/" + kver + "/build/" + f) // its links are the host's
			b, _ := os.ReadFile(p)
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "CONFIG_MODULE_SIG_HASH="); ok && hash == "" {
					hash = strings.Trim(v, `"`)
				}
			}
		}
		if hash != "sha256" {
			t.Errorf("%s: the headers name CONFIG_MODULE_SIG_HASH %q, want Debian's sha256", w.name, hash)
		}
		put(t, w.root+"/keys/enrolled.pem", enrolled.keyPEM)
		put(t, w.root+"/keys/enrolled.x509", enrolled.certDER) // DER, as the kernel's certs/signing_key.x509
		put(t, w.root+"/keys/other.pem", other.keyPEM)
		put(t, w.root+"/keys/other.crt", other.certPEM)
		signed[w.name] = map[string][]byte{}
		for name, kc := range map[string][2]string{"enrolled": {"/keys/enrolled.pem", "/keys/enrolled.x509"},
			"other": {"/keys/other.pem", "/keys/other.crt"}} {
			put(t, w.root+"/m/"+name+".ko", module)
			o := w.run(t, "chroot", "HOST", signFile, hash, kc[0], kc[1], "/m/"+name+".ko")
			if o.code != 0 {
				t.Fatalf("%s sign-file (%s): exit %d: %s", w.name, name, o.code, o.output)
			}
			b, err := os.ReadFile(w.root + "/m/" + name + ".ko")
			if err != nil {
				t.Fatal(err)
			}
			signed[w.name][name] = b
		}
	})
	for _, world := range []string{"real", "fake"} {
		b := signed[world]["enrolled"]
		// The trailer: module, PKCS#7, struct module_signature, marker.
		if !bytes.HasPrefix(b, module) || !bytes.HasSuffix(b, []byte(ModuleSigMarker)) {
			t.Fatalf("%s sign-file: no signature trailer after the module", world)
		}
		info := b[len(b)-len(ModuleSigMarker)-moduleSigInfoLen : len(b)-len(ModuleSigMarker)]
		if info[2] != pkeyIDPKCS7 || int(binary.BigEndian.Uint32(info[8:])) != len(b)-len(module)-moduleSigInfoLen-len(ModuleSigMarker) {
			t.Errorf("%s sign-file: struct module_signature %x", world, info)
		}
		if err := CheckModuleSignature(b, enrolled.certPEM); err != nil {
			t.Errorf("%s-signed with the enrolled key: %v", world, err)
		}
		if err := CheckModuleSignature(b, other.certDER); !errors.Is(err, errNoKey) {
			t.Errorf("%s-signed, checked against another certificate: %v, want %v", world, err, errNoKey)
		}
	}

	// The fake kernel under module.sig_enforce, trusting the enrolled
	// certificate, loads modules the REAL sign-file signed.
	if err := SetModulePolicy(fake.root, Spec{SigEnforce: true}); err != nil {
		t.Fatal(err)
	}
	if err := TrustCerts(fake.root, enrolled.certPEM); err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(signed["real"]["enrolled"])
	tampered[len(module)/2] ^= 1
	// id_type 1 (X.509, of the kernels before PKCS#7): mod_check_sig's
	// ENOPKG, fatal only under enforcement or lockdown.
	notPKCS7 := bytes.Clone(signed["real"]["enrolled"])
	notPKCS7[len(notPKCS7)-len(ModuleSigMarker)-moduleSigInfoLen+2] = 1
	for _, c := range []struct {
		name   string
		ko     []byte
		policy Spec
		want   string // "" loads
	}{
		{"signed by the enrolled key", signed["real"]["enrolled"], Spec{SigEnforce: true}, ""},
		{"signed by another key", signed["real"]["other"], Spec{SigEnforce: true}, "Key was rejected by service"},
		{"unsigned", module, Spec{SigEnforce: true}, "Key was rejected by service"},
		{"unsigned, lockdown", module, Spec{Lockdown: "integrity"}, "Operation not permitted"},
		{"another key, lockdown", signed["real"]["other"], Spec{Lockdown: "integrity"}, "Operation not permitted"},
		{"unsigned, no enforcement", module, Spec{}, ""},
		{"tampered after signing, no enforcement", tampered, Spec{}, "Key was rejected by service"},
		{"not PKCS#7, no enforcement", notPKCS7, Spec{}, ""},
		{"not PKCS#7, sig_enforce", notPKCS7, Spec{SigEnforce: true}, "Key was rejected by service"},
	} {
		if err := SetModulePolicy(fake.root, c.policy); err != nil {
			t.Fatal(err)
		}
		put(t, fake.root+"/m/load.ko", c.ko)
		o := fake.run(t, "insmod", "HOST/m/load.ko")
		switch {
		case c.want == "" && o.code != 0:
			t.Errorf("%s: fake insmod refused it: %s", c.name, o.output)
		case c.want != "" && (o.code == 0 || !strings.Contains(o.output, c.want)):
			t.Errorf("%s: fake insmod exit %d %q, want refused with %q", c.name, o.code, o.output, c.want)
		}
		if o.code == 0 {
			if o := fake.run(t, "rmmod", "tenstorrent"); o.code != 0 {
				t.Fatal(o.output)
			}
		}
	}
}
