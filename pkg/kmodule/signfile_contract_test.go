package kmodule_test

import (
	"bytes"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/fakehost/realhost"
	"github.com/rollbook/rollbook/pkg/kmodule"
)

// The kernel's own scripts/sign-file (Debian's linux-kbuild, in the
// real-host rootfs, run in a chroot of it with its OpenSSL) and Signer sign
// the same module with the same key, certificate DER or PEM: the bytes are
// the same (RSA PKCS#1 v1.5 is deterministic), so what kubectl tt appends
// is what the kernel's tooling appends. Verify accepts what sign-file
// signed and refuses it changed.
func TestContractSignMatchesSignFile(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	kver := realhost.KernelRelease(t, rootfs)
	host := realhost.Host(t, rootfs)
	chroot, err := realhost.SystemTool("chroot")
	if err != nil {
		t.Skip(err)
	}
	signFile := "/lib/modules/" + kver + "/build/scripts/sign-file"
	admin := newPair(t, "fleet module signing", false)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: admin.certDER})
	files := map[string][]byte{"k/key.pem": admin.keyPEM, "k/cert.der": admin.certDER, "k/cert.pem": certPEM}
	ko := fakehost.KernelObject("2.9.0", kver)
	for p, b := range files {
		write(t, filepath.Join(host, p), b)
	}
	s, err := kmodule.NewSigner(admin.keyPEM, admin.certDER)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := s.Sign(ko)
	if err != nil {
		t.Fatal(err)
	}
	for _, cert := range []string{"/k/cert.der", "/k/cert.pem"} {
		write(t, filepath.Join(host, "m/tenstorrent.ko"), ko)
		out, err := exec.Command(chroot, host, signFile, "sha256", "/k/key.pem", cert, "/m/tenstorrent.ko").CombinedOutput()
		if err != nil {
			t.Fatalf("sign-file (%s): %v\n%s", cert, err, out)
		}
		real, err := os.ReadFile(filepath.Join(host, "m/tenstorrent.ko"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(real, ours) {
			t.Errorf("sign-file with %s appended %d bytes, Signer %d; they differ from byte %d", cert, len(real)-len(ko),
				len(ours)-len(ko), firstDiff(real, ours))
		}
		if err := kmodule.Verify(real, admin.cert); err != nil {
			t.Errorf("Verify of what sign-file signed: %v", err)
		}
		real[len(ko)/2] ^= 1
		if err := kmodule.Verify(real, admin.cert); err == nil {
			t.Error("Verify accepted sign-file's module changed after signing")
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
