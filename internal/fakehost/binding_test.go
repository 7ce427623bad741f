package fakehost_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost"
)

// A card whose probe fails in a version gets no driver link, device node
// or class entry under it; the card after it takes ordinal 0 (tt-kmd's
// xa_alloc gives the lowest free one), and its class entry points at its
// own PCI function.
func TestFailedProbeLeavesTheCardUnbound(t *testing.T) {
	root := t.TempDir()
	if err := fakehost.Create(root, fakehost.Spec{}); err != nil {
		t.Fatal(err)
	}
	if err := fakehost.FailProbe(root, 0, "2.8.0"); err != nil {
		t.Fatal(err)
	}
	if err := fakehost.FailProbe(root, 5, "2.8.0"); err == nil {
		t.Error("FailProbe of a card the host lacks succeeded")
	}
	load := func(v string) {
		t.Helper()
		ko := filepath.Join(root, "tmp", v+".ko")
		if err := os.MkdirAll(filepath.Dir(ko), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ko, fakehost.KernelObject(v, fakehost.DefaultKernel), 0o644); err != nil {
			t.Fatal(err)
		}
		if code := runTool(t, root, "insmod", ko); code != 0 {
			t.Fatalf("insmod %s: exit %d", v, code)
		}
	}
	load("2.8.0")
	pci := filepath.Join(root, "sys/bus/pci/devices")
	if _, err := os.Lstat(filepath.Join(pci, fakehost.BusID(0), "driver")); err == nil {
		t.Error("the card whose probe failed is bound")
	}
	if l, err := os.Readlink(filepath.Join(pci, fakehost.BusID(1), "driver")); err != nil || filepath.Base(l) != "tenstorrent" {
		t.Errorf("the other card's driver link: %q, %v", l, err)
	}
	nodes, _ := filepath.Glob(filepath.Join(root, "dev/tenstorrent/[0-9]*"))
	if len(nodes) != 1 {
		t.Errorf("device nodes %v, want one", nodes)
	}
	if l, _ := os.Readlink(filepath.Join(root, "sys/class/tenstorrent/tenstorrent!0/device")); filepath.Base(l) != fakehost.BusID(1) {
		t.Errorf("ordinal 0 is %q, want the bound card %s", l, fakehost.BusID(1))
	}
	if code := runTool(t, root, "rmmod", "tenstorrent"); code != 0 {
		t.Fatalf("rmmod: exit %d", code)
	}
	if _, err := os.Lstat(filepath.Join(pci, fakehost.BusID(1), "driver")); err == nil {
		t.Error("rmmod left the driver link")
	}
	load("2.7.0")
	nodes, _ = filepath.Glob(filepath.Join(root, "dev/tenstorrent/[0-9]*"))
	if len(nodes) != 2 {
		t.Errorf("another version binds %d card(s), want both", len(nodes))
	}
}

// A holder through a mapping or a dma-buf keeps the refcount until it
// ends, as an fd does.
func TestHoldersAfterCloseKeepTheModule(t *testing.T) {
	for _, via := range []string{fakehost.HoldMmap, fakehost.HoldDmaBuf} {
		root := t.TempDir()
		if err := fakehost.Create(root, fakehost.Spec{LoadedKMD: "2.7.0"}); err != nil {
			t.Fatal(err)
		}
		if err := fakehost.StartProcess(root, fakehost.Holder{PID: 77, Via: via}); err != nil {
			t.Fatal(err)
		}
		if o, _ := fakehost.Inspect(root); o.Refcnt != 1 {
			t.Errorf("%s: refcnt %d, want 1", via, o.Refcnt)
		}
		if code := runTool(t, root, "rmmod", "tenstorrent"); code == 0 {
			t.Errorf("%s: rmmod succeeded under a holder", via)
		}
		if err := fakehost.EndProcess(root, 77); err != nil {
			t.Fatal(err)
		}
		if o, _ := fakehost.Inspect(root); o.Refcnt != 0 {
			t.Errorf("%s: refcnt %d after the holder ended", via, o.Refcnt)
		}
	}
}

func runTool(t *testing.T, root string, args ...string) int {
	t.Helper()
	t.Setenv(fakehost.RootEnv, root)
	return fakehost.Main(args)
}
