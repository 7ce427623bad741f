package nodeagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSigningValidate(t *testing.T) {
	for _, c := range []struct {
		s    Signing
		want string // "" valid
	}{
		{Signing{}, ""},
		{Signing{Dir: "/rollbook/signing"}, ""},
		{Signing{KeyHostPath: "/var/lib/shim-signed/mok/MOK.priv", CertHostPath: "/var/lib/shim-signed/mok/MOK.der"}, ""},
		{Signing{KeyHostPath: "/var/lib/dkms/mok.key"}, "go together"},
		{Signing{Dir: "/rollbook/signing", KeyHostPath: "/a", CertHostPath: "/b"}, "exclusive"},
		{Signing{KeyHostPath: "var/lib/dkms/mok.key", CertHostPath: "/var/lib/dkms/mok.pub"}, "absolute"},
		{Signing{KeyHostPath: "/var/lib/../etc/shadow", CertHostPath: "/var/lib/dkms/mok.pub"}, "clean"},
		{Signing{KeyHostPath: "/proc/self/environ", CertHostPath: "/var/lib/dkms/mok.pub"}, "under /proc"},
		{Signing{KeyHostPath: "/var/lib/dkms/mok.key", CertHostPath: "/dev/sda"}, "under /dev"},
	} {
		err := c.s.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.s, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want an error saying %q", c.s, err, c.want)
		}
	}
}

func TestModuleSigHash(t *testing.T) {
	dir := t.TempDir()
	if _, err := moduleSigHash(dir); err == nil || !strings.Contains(err.Error(), "CONFIG_MODULE_SIG_HASH") {
		t.Errorf("headers without it: %v", err)
	}
	writeTestFile(t, dir+"/.config", "CONFIG_MODULE_SIG=y\nCONFIG_MODULE_SIG_HASH=\"sha512\"\n")
	if h, err := moduleSigHash(dir); err != nil || h != "sha512" {
		t.Errorf(".config: %q %v", h, err)
	}
	// auto.conf is what kbuild reads; it wins over .config.
	writeTestFile(t, dir+"/include/config/auto.conf", "CONFIG_MODULE_SIG_HASH=\"sha256\"\n")
	if h, err := moduleSigHash(dir); err != nil || h != "sha256" {
		t.Errorf("auto.conf: %q %v", h, err)
	}
}

func writeTestFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
