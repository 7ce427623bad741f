package fakehost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fake loader refuses a module built against the same release and
// build configured otherwise, as the kernel does (module_layout's CRC in
// __versions), loads one built against its own config, and a kernel whose
// config changed in place refuses what it loaded before.
func TestLoaderRefusesAModuleOfAnotherConfig(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "", KernelHeaders: true})
	src := filepath.Join(root, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "module.c"), []byte(`MODULE_VERSION("2.0.0");`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "chroot", root, "make", "-C", "/lib/modules/"+DefaultKernel+"/build", "M=/src",
		"modules"); code != 0 {
		t.Fatalf("make: %s", out)
	}
	built, err := os.ReadFile(filepath.Join(src, "tenstorrent.ko"))
	if err != nil {
		t.Fatal(err)
	}
	if moduleLayout(built) == "" || moduleLayout(built) != runningLayout(root, DefaultKernel) {
		t.Fatalf("built with module_layout %q, the kernel's is %q", moduleLayout(built), runningLayout(root, DefaultKernel))
	}
	other := filepath.Join(root, "other.ko")
	conf := []byte(kernelConfig(Spec{KernelConfig: []string{"CONFIG_RANDSTRUCT_FULL=y"}}))
	if err := os.WriteFile(other, KernelObjectFor("2.0.0", DefaultKernel, LayoutCRC(conf)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "insmod", other); code == 0 || !strings.Contains(out, "module_layout") {
		t.Fatalf("insmod of a module of another config: code %d %s", code, out)
	}
	if code, out := invoke(t, root, "insmod", filepath.Join(src, "tenstorrent.ko")); code != 0 {
		t.Fatalf("insmod of the module built here: %s", out)
	}
	if code, out := invoke(t, root, "rmmod", "tenstorrent"); code != 0 {
		t.Fatalf("rmmod: %s", out)
	}
	if err := SetKernelConfig(root, "CONFIG_RANDSTRUCT_FULL=y"); err != nil {
		t.Fatal(err)
	}
	if code, _ := invoke(t, root, "insmod", filepath.Join(src, "tenstorrent.ko")); code == 0 {
		t.Fatal("a kernel configured otherwise loaded the module built before")
	}
	if code, out := invoke(t, root, "insmod", other); code != 0 {
		t.Fatalf("insmod of the module of its config: %s", out)
	}
}
