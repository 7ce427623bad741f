package fakehost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnsafeCallsUnderAHolderAreRefusedAndRecorded(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "2.0.0", Holders: []Holder{{PID: 4300002, Comm: "bench"}}})
	bundle := filepath.Join(t.TempDir(), "b.fwbundle")
	if err := WriteBundle(bundle, "19.9.0"); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "tt-flash", "flash", "--fw-tar", bundle); code == 0 || !strings.Contains(out, "device busy") {
		t.Fatalf("tt-flash under a holder: exit %d\n%s", code, out)
	}
	if o, _ := Inspect(root); o.Firmware[0] == "19.9.0.0" {
		t.Fatal("tt-flash wrote firmware while the device was held")
	}
	if code, _ := invoke(t, root, "rmmod", "tenstorrent"); code == 0 {
		t.Fatal("rmmod under a holder succeeded")
	}
	ev, err := Events(root, 0)
	if err != nil || len(ev) != 2 || ev[0].Kind != EventFlashUnderHolder || ev[1].Kind != EventRmmodUnderHolder ||
		!strings.Contains(ev[0].Detail, "4300002") {
		t.Fatalf("events = %+v (%v)", ev, err)
	}
	if rest, _ := Events(root, 2); len(rest) != 0 {
		t.Fatalf("Events(skip 2) = %+v", rest)
	}
	if code, out := invoke(t, root, "kill", "-9", "4300002"); code != 0 {
		t.Fatal(out)
	}
	if code, out := invoke(t, root, "tt-flash", "flash", "--fw-tar", bundle); code != 0 {
		t.Fatalf("tt-flash with no holder: %s", out)
	}
	if ev, _ := Events(root, 0); len(ev) != 2 {
		t.Fatalf("a safe flash recorded an event: %+v", ev)
	}
}

func TestGitKnowsOnlyRemoteTags(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "2.0.0", KernelHeaders: true})
	for tag, ok := range map[string]bool{"ttkmd-2.8.0": true, "ttkmd-99.0.0": false, "ttkmd-2.8": false, "v2.8.0": false} {
		dir := filepath.Join(root, "src", tag)
		code, out := invoke(t, root, "git", "clone", "--depth", "1", "--branch", tag, "https://github.com/tenstorrent/tt-kmd.git", dir)
		if (code == 0) != ok {
			t.Errorf("clone %s: exit %d, want ok=%v\n%s", tag, code, ok, out)
		}
	}
}

func TestRebootIntoANewKernelLosesTheModule(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "2.0.0", KernelHeaders: true, Holders: []Holder{{PID: 4300003, Comm: "bench"}}})
	if err := Reboot(root, "6.8.0-99-generic", false); err != nil {
		t.Fatal(err)
	}
	o, err := Inspect(root)
	if err != nil || o.LoadedKMD != "" || len(deviceHolders(root)) != 0 {
		t.Fatalf("after reboot: %+v %v holders %v", o, err, deviceHolders(root))
	}
	if code, out := invoke(t, root, "tt-flash", "flash", "--fw-tar", "/nonexistent"); code == 0 {
		t.Fatalf("tt-flash without a module: %s", out)
	}
}

// Debian's split header trees include each other by absolute path: the
// build works only with paths as the host sees them (in a chroot of it).
func TestDebianHeadersBuildOnlyInAChroot(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "2.0.0", KernelHeaders: true, DebianHeaders: true})
	src := filepath.Join(root, "var/cache/src")
	if code, out := invoke(t, root, "git", "clone", "--branch", "ttkmd-2.8.0", "https://github.com/tenstorrent/tt-kmd.git", src); code != 0 {
		t.Fatal(out)
	}
	kdir := filepath.Join(root, "usr/src/linux-headers-"+DefaultKernel)
	if code, out := invoke(t, root, "make", "-C", kdir, "M="+src, "modules"); code == 0 || !strings.Contains(out, "-common/Makefile") {
		t.Fatalf("a root-prefixed build of a Debian tree must fail on its absolute include: %d\n%s", code, out)
	}
	code, out := invoke(t, root, "chroot", root, "make", "-C", "/lib/modules/"+DefaultKernel+"/build", "M=/var/cache/src", "modules")
	if code != 0 {
		t.Fatalf("chroot build: %d\n%s", code, out)
	}
	noTools := newRoot(t, Spec{LoadedKMD: "2.0.0", KernelHeaders: true, NoToolchain: true})
	if code, out := invoke(t, noTools, "chroot", noTools, "make", "-C", "/lib/modules/"+DefaultKernel+"/build", "M=/x", "modules"); code != 127 {
		t.Fatalf("a host without make: %d\n%s", code, out)
	}
}

// The fake kernel binds a card only when the loaded tt-kmd's id table
// has its chip (ttkmd.Drives): a Blackhole before 1.31 stays unbound.
func TestLoadBindsOnlyTheChipsTheVersionDrives(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "1.30", Devices: []Device{{Board: "n150", Firmware: "18.2.0.0"},
		{Board: "p150", Firmware: "18.2.0.0"}}})
	dev, err := os.ReadFile(filepath.Join(root, pciDir, BusID(1), "device"))
	if err != nil || strings.TrimSpace(string(dev)) != "0xb140" {
		t.Fatalf("a p150's PCI device id: %q (%v), want 0xb140", dev, err)
	}
	if _, err := os.Lstat(filepath.Join(root, pciDir, BusID(1), "driver")); !os.IsNotExist(err) {
		t.Errorf("tt-kmd 1.30 bound the Blackhole card (%v)", err)
	}
	if _, err := os.Lstat(filepath.Join(root, pciDir, BusID(0), "driver")); err != nil {
		t.Errorf("tt-kmd 1.30 left the Wormhole card unbound: %v", err)
	}
}
