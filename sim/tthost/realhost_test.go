package tthost

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/fakehost/realhost"
)

// A real-host node's root is the real OS with the fake kernel and cards
// over it; the shared rootfs is never written.
func TestAddRealOverlaysTheRootfs(t *testing.T) {
	rootfs, why := realhost.Find()
	if why != "" {
		t.Skip(why)
	}
	kver, err := RealHostKernel(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	h := &Hosts{Dir: t.TempDir(), roots: map[string]string{}}
	root, err := h.AddReal("n1", fakehost.Spec{Kernel: kver, LoadedKMD: "2.7.0", KernelHeaders: true, CachedKMD: []string{"2.7.0"}}, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Unmount() })
	if !h.Real("n1") {
		t.Error("Real(n1) is false")
	}
	if v, err := os.ReadFile(filepath.Join(root, "sys/module/tenstorrent/version")); err != nil || strings.TrimSpace(string(v)) != "2.7.0" {
		t.Errorf("loaded module %q (%v)", v, err)
	}
	// The OS's own files stay: libc, the headers' Makefile, no fake cache.
	libc, err := os.ReadFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libc.so.6"))
	if err != nil || !bytes.HasPrefix(libc, []byte("\x7fELF")) {
		t.Errorf("libc is not the real one (%v)", err)
	}
	build, _ := os.Readlink(filepath.Join(root, "lib/modules", kver, "build")) // absolute, as the host sees it
	if mk, err := os.ReadFile(filepath.Join(root, build, "Makefile")); err != nil || strings.Contains(string(mk), "fake") {
		t.Errorf("the headers' Makefile was replaced (%v): %.80s", err, mk)
	}
	if _, err := os.Stat(filepath.Join(root, "var/cache/tt-kmd")); err == nil {
		t.Error("a fake module cache was written over the real OS")
	}
	if _, err := os.Stat(filepath.Join(rootfs, ".fakehost")); err == nil {
		t.Errorf("the shared rootfs %s was written", rootfs)
	}
	if err := h.Unmount(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("after Unmount the node's root still shows %d entries", len(entries))
	}
}
