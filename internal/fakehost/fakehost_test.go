package fakehost

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func newRoot(t *testing.T, spec Spec) string {
	t.Helper()
	root := t.TempDir()
	if err := Create(root, spec); err != nil {
		t.Fatal(err)
	}
	return root
}

func invoke(t *testing.T, root string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(args, root, &out, &out)
	return code, out.String()
}

func TestToolsRefuseWithoutAFakeRoot(t *testing.T) {
	for _, root := range []string{"", "/", "relative/dir", t.TempDir()} {
		if code, _ := invoke(t, root, "rmmod", "tenstorrent"); code == 0 {
			t.Errorf("root %q: rmmod succeeded", root)
		}
	}
}

func TestModuleLifecycle(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "1.31.0", Holders: []Holder{{PID: 4300001, PodUID: "p", ContainerID: "c", Devices: []int{0, 1}}}})
	if code, out := invoke(t, root, "rmmod", "tenstorrent"); code == 0 || !bytes.Contains([]byte(out), []byte("in use")) {
		t.Fatalf("rmmod with refcnt 2: code %d %s", code, out)
	}
	if code, out := invoke(t, root, "kill", "-KILL", "4300001"); code != 0 {
		t.Fatalf("kill: %s", out)
	}
	if o, _ := Inspect(root); o.Refcnt != 0 {
		t.Fatalf("refcnt after kill = %d", o.Refcnt)
	}
	if code, out := invoke(t, root, "rmmod", "tenstorrent"); code != 0 {
		t.Fatalf("rmmod: %s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "dev/tenstorrent/0")); !os.IsNotExist(err) {
		t.Fatal("device nodes must vanish with the module")
	}
	wrongKernel := filepath.Join(root, "wrong.ko")
	if err := os.WriteFile(wrongKernel, KernelObject("2.0.0", "6.8.0-1-generic"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "insmod", wrongKernel); code == 0 {
		t.Fatalf("insmod of a module for another kernel succeeded: %s", out)
	}
	good := filepath.Join(root, "good.ko")
	if err := os.WriteFile(good, KernelObject("2.0.0", DefaultKernel), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "insmod", good); code != 0 {
		t.Fatalf("insmod: %s", out)
	}
	if o, _ := Inspect(root); o.LoadedKMD != "2.0.0" {
		t.Fatalf("loaded = %q", o.LoadedKMD)
	}
}

func TestToolsStayInsideTheRoot(t *testing.T) {
	root := newRoot(t, Spec{KernelHeaders: true})
	outside := t.TempDir()
	if code, _ := invoke(t, root, "git", "clone", "--depth", "1", "--branch", "ttkmd-2.0.0", "https://x/tt-kmd.git",
		filepath.Join(outside, "src")); code == 0 {
		t.Fatal("git cloned outside the root")
	}
	if code, _ := invoke(t, root, "insmod", "/etc/hostname"); code == 0 {
		t.Fatal("insmod read outside the root")
	}
	if code, _ := invoke(t, root, "depmod", "-a", "-b", "/", DefaultKernel); code == 0 {
		t.Fatal("depmod wrote outside the root")
	}
	if code, _ := invoke(t, root, "kill", "-KILL", strconv.Itoa(os.Getpid())); code == 0 {
		t.Fatal("kill reported success for a pid that is not a fake process")
	}
}

func TestSnapshotAndFlash(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "2.0.0", Devices: []Device{{Firmware: "18.2.0.0"}, {Firmware: "19.9.0.0"}}})
	code, out := invoke(t, root, "tt-smi", "-s")
	if code != 0 || !bytes.HasPrefix([]byte(out), []byte("Detected Chips: 2\n{")) {
		t.Fatalf("snapshot: %d %q", code, out)
	}
	bundle := filepath.Join(t.TempDir(), "b.fwbundle")
	if err := WriteBundle(bundle, "19.9.0"); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "tt-flash", "--no-color", "flash", "--fw-tar", bundle); code != 0 {
		t.Fatalf("tt-flash: %s", out)
	}
	o, _ := Inspect(root)
	if o.Firmware[0] != "19.9.0.0" || o.Firmware[1] != "19.9.0.0" {
		t.Fatalf("firmware = %v", o.Firmware)
	}
	fw, _ := os.ReadFile(filepath.Join(root, "sys/class/tenstorrent/tenstorrent!0/tt_fw_bundle_ver"))
	if string(fw) != "19.9.0.0\n" {
		t.Fatalf("sysfs fw = %q", fw)
	}
}

func TestTTSMINeedsTheHostsGlibc(t *testing.T) {
	root := newRoot(t, Spec{HostTTSMI: "5.0.0", HostGlibc: "2.31"})
	if code, out := invoke(t, root, "chroot", root, "/usr/local/bin/tt-smi", "--version"); code != 0 || out != "5.0.0\n" {
		t.Fatalf("the host's own tt-smi under chroot: %d %q", code, out)
	}
	newer := filepath.Join(root, "usr/local/bin/.tt-smi.new")
	if err := WriteTTSMIBinaryFor(newer, "5.2.0", "2.35"); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "chroot", root, "/usr/local/bin/.tt-smi.new", "--version"); code == 0 ||
		!bytes.Contains([]byte(out), []byte("GLIBC_2.35' not found")) {
		t.Fatalf("a tt-smi built for glibc 2.35 on a 2.31 host: %d %q", code, out)
	}
	if o, err := Inspect(root); err != nil || !o.HostTTSMIRuns {
		t.Fatalf("inspect: %+v %v", o, err)
	}
}

func TestCreateRebootedHost(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "2.7.0", KernelHeaders: true, RebootedInto: "6.8.0-49-generic"})
	o, err := Inspect(root)
	if err != nil || o.Kernel != "6.8.0-49-generic" || o.LoadedKMD != "" {
		t.Fatalf("rebooted host: %+v %v", o, err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/src/linux-headers-6.8.0-49-generic/Makefile")); err != nil {
		t.Fatalf("headers for the new kernel: %v", err)
	}
}
