// Package realhost gives tests a real Debian host root (hack/realhost-rootfs.sh:
// bookworm with linux-headers-amd64, gcc-12, make, kmod, git), one
// writable overlay of it per test, the real host tools to run against it,
// and a git remote of a stand-in tt-kmd. Only the module load is not real:
// insmod is a stand-in that checks the module with the real modinfo and
// writes /sys/module/tenstorrent as the kernel would.
package realhost

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost/realhost/kmdrepo"
)

// RootfsEnv overrides where the real-host root filesystem is.
const RootfsEnv = "ROLLBOOK_REALHOST_ROOTFS"

// Rootfs returns the cached real-host root filesystem, or skips the test
// saying why it cannot run (not root, no rootfs, no overlayfs).
func Rootfs(t testing.TB) string {
	t.Helper()
	root, why := Find()
	if why != "" {
		t.Skip(why)
	}
	return root
}

// Find is Rootfs for a TestMain: the root filesystem, or why there is none
// to use here.
func Find() (root, why string) {
	if os.Geteuid() != 0 {
		return "", "realhost: needs root (overlay mounts, chroot); CI runs as root"
	}
	root = os.Getenv(RootfsEnv)
	if root == "" {
		root = filepath.Join(repoRoot(), ".cache/realhost-rootfs/root")
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/kmod")); err != nil {
		return "", fmt.Sprintf("realhost: no real-host root filesystem at %s (build it with `bash hack/realhost-rootfs.sh`, or set %s): %v",
			root, RootfsEnv, err)
	}
	return root, ""
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "../../.."))
}

// KernelRelease is the release of the headers installed in root.
func KernelRelease(t testing.TB, root string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "lib/modules"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("realhost: want exactly one /lib/modules/<kver> in %s: %v %v", root, entries, err)
	}
	return entries[0].Name()
}

// Host mounts a writable overlay of rootfs (changes vanish with the test)
// and makes it look like a running host: /proc/sys/kernel/osrelease says
// the headers' kernel, no tenstorrent module loaded.
func Host(t testing.TB, rootfs string) string {
	t.Helper()
	dir := t.TempDir()
	upper, work, merged := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "root")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + rootfs + ",upperdir=" + upper + ",workdir=" + work
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("realhost: cannot mount an overlay of %s: %v", rootfs, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(merged, syscall.MNT_DETACH); err != nil {
			t.Errorf("realhost: unmount %s: %v", merged, err)
		}
	})
	kver := KernelRelease(t, rootfs)
	write(t, filepath.Join(merged, "proc/sys/kernel/osrelease"), kver+"\n", 0o644)
	// One Tenstorrent card on the bus, for the load stand-in to bind (the
	// agent verifies that the module serves every card present).
	write(t, filepath.Join(merged, "sys/bus/pci/devices", CardBusID, "vendor"), "0x1e52\n", 0o644)
	return merged
}

func write(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// Tools returns a directory to put first (and alone) on PATH: git and
// chroot of this machine, modinfo, depmod, modprobe and rmmod of the
// rootfs's kmod (run with the rootfs's loader and libraries, so paths are
// the caller's), and the insmod stand-in.
func Tools(t testing.TB, rootfs string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"git", "chroot"} {
		p, err := SystemTool(name)
		if err != nil {
			t.Skipf("realhost: %v", err)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"modinfo", "depmod", "modprobe"} {
		write(t, filepath.Join(dir, name), kmodWrapper(rootfs, name), 0o755)
	}
	write(t, filepath.Join(dir, "insmod"), insmodStandIn(dir), 0o755)
	write(t, filepath.Join(dir, "rmmod"), rmmodStandIn, 0o755)
	return dir
}

// HostEnv is the environment entry that tells the insmod and rmmod
// stand-ins which host root they act on (nodeagent.Agent.Env).
func HostEnv(host string) string { return HostRootEnv + "=" + host }

// HostRootEnv names the host root of the module-load stand-ins.
const HostRootEnv = "REALHOST_ROOT"

// SystemTool finds this machine's own name in the system directories,
// never on PATH (tests put fake tools there).
func SystemTool(name string) (string, error) { return kmdrepo.SystemTool(name) }

// KmodArgv is argv running the rootfs's kmod as name (modinfo, depmod, …).
func KmodArgv(rootfs, name string) []string {
	return []string{filepath.Join(rootfs, "lib64/ld-linux-x86-64.so.2"), "--library-path",
		filepath.Join(rootfs, "usr/lib/x86_64-linux-gnu"), "--argv0", name, filepath.Join(rootfs, "usr/bin/kmod")}
}

func kmodWrapper(rootfs, name string) string {
	return "#!/bin/sh\n# the real " + name + " of the real-host rootfs (kmod)\nexec " + shellJoin(KmodArgv(rootfs, name)) + " \"$@\"\n"
}

// CardBusID is the PCI address of the one card Host puts on the bus.
const CardBusID = "0000:01:00.0"

// insmodStandIn loads nothing: it refuses a module whose vermagic is not
// the host's running kernel (as the kernel does) and otherwise writes
// /sys/module/tenstorrent/{version,refcnt} from the module's real modinfo
// and binds every Tenstorrent PCI function as tt-kmd's probe does (the
// function's driver link, /dev/tenstorrent/<ordinal>, and the class entry
// with the telemetry a card whose firmware answers has).
// The host root is $REALHOST_ROOT.
func insmodStandIn(tools string) string {
	return `#!/bin/sh
# STAND-IN for insmod (the module load needs a kernel): realhost package.
set -eu
PATH=/usr/bin:/bin # the stand-in's own helpers (cat, cut, mkdir) from this machine
ko=$1
root=${REALHOST_ROOT:?}
running=$(cat "$root/proc/sys/kernel/osrelease")
magic=$(` + tools + `/modinfo -F vermagic "$ko" | cut -d' ' -f1)
if [ "$magic" != "$running" ]; then
  echo "insmod: ERROR: could not insert module $ko: Invalid module format" >&2
  exit 1
fi
if [ -e "$root/sys/module/tenstorrent" ]; then
  echo "insmod: ERROR: could not insert module $ko: File exists" >&2
  exit 1
fi
mkdir -p "$root/sys/module/tenstorrent"
` + tools + `/modinfo -F version "$ko" >"$root/sys/module/tenstorrent/version"
echo 0 >"$root/sys/module/tenstorrent/refcnt"
mkdir -p "$root/dev/tenstorrent"
n=0
for d in "$root"/sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor" 2>/dev/null)" = 0x1e52 ] || continue
  ln -sfn ../../../bus/pci/drivers/tenstorrent "$d/driver"
  : >"$root/dev/tenstorrent/$n"
  mkdir -p "$root/sys/class/tenstorrent/tenstorrent!$n"
  echo n150 >"$root/sys/class/tenstorrent/tenstorrent!$n/tt_card_type"
  n=$((n + 1))
done
`
}

// rmmodStandIn unloads nothing from the kernel: it refuses a held module
// and otherwise removes /sys/module/tenstorrent under $REALHOST_ROOT, with
// the cards' bindings and device nodes.
const rmmodStandIn = `#!/bin/sh
# STAND-IN for rmmod (the module unload needs a kernel): realhost package.
set -eu
PATH=/usr/bin:/bin # the stand-in's own helpers (cat, cut, mkdir) from this machine
root=${REALHOST_ROOT:?}
m=$root/sys/module/$1
[ -e "$m" ] || { echo "rmmod: ERROR: Module $1 is not currently loaded" >&2; exit 1; }
[ "$(cat "$m/refcnt")" = 0 ] || { echo "rmmod: ERROR: Module $1 is in use" >&2; exit 1; }
rm -rf "$m"
rm -f "$root"/sys/bus/pci/devices/*/driver "$root"/dev/tenstorrent/[0-9]*
rm -rf "$root"/sys/class/tenstorrent/tenstorrent!*
`

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// ModuleRepo creates a bare git repository of a stand-in tt-kmd (kmdrepo):
// a real kernel module named tenstorrent, one tag ttkmd-<v> per version
// whose MODULE_VERSION is v. Returns its file:// URL.
func ModuleRepo(t testing.TB, versions ...string) string {
	t.Helper()
	if _, err := SystemTool("git"); err != nil {
		t.Skipf("realhost: %v", err)
	}
	url, err := kmdrepo.Write(t.TempDir(), versions...)
	if err != nil {
		t.Fatal(err)
	}
	return url
}
