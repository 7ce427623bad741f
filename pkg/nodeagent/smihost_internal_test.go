package nodeagent

import (
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost/realhost"
)

// Contract: on a real Debian root (the real-host rootfs, made by
// debootstrap and apt), the owner of a dpkg-installed program is read from
// dpkg's own file lists as `dpkg -S` reads them, and a file no package
// installed has none.
func TestPackageOwnerReadsARealDpkgDatabase(t *testing.T) {
	root := realhost.Rootfs(t)
	a := &Agent{Root: root}
	if got := a.packageOwner("/usr/bin/make", "/usr/bin/make"); got != "dpkg package make" {
		t.Errorf("/usr/bin/make: owner %q, want dpkg package make", got)
	}
	if got := a.packageOwner("/usr/local/bin/tt-smi", "/usr/local/bin/tt-smi"); got != "" {
		t.Errorf("a file no package installed: owner %q", got)
	}
}
