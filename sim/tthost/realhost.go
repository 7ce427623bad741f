package tthost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/fakehost/realhost/kmdrepo"
)

// Real-host nodes: a node's host root is a writable overlay of a real Debian
// root filesystem (hack/realhost-rootfs.sh: linux-headers-amd64, gcc-12,
// make, kmod, git) with the fake kernel's and card's /proc, /sys and /dev
// laid over it, so a helper's chroot, git, kbuild, modinfo, depmod and
// modprobe are the real ones; only what needs a kernel or a card stays fake.

// EnvRealHostRootfs is the real-host root filesystem the tt scenarios' nodes
// run on; `sim up --tt-realhost-rootfs`. It is not ROLLBOOK_REALHOST_ROOTFS
// (where tests find the rootfs): make test sets that for every package, and
// only the packages that ask get real-host nodes.
const EnvRealHostRootfs = "ROLLBOOK_SIM_TT_REALHOST_ROOTFS"

// KMDRemoteDir is where, under the sim's directory, the git remote of the
// stand-in tt-kmd is (kmdrepo): the bare repository tt-kmd.git, reachable
// from every helper at the same path, so
// --git-url file://<sim dir>/kmd-remote/tt-kmd.git.
const KMDRemoteDir = "kmd-remote"

// RealHostKernel is the kernel release of the headers installed in rootfs,
// the release a real-host node runs.
func RealHostKernel(rootfs string) (string, error) {
	if _, err := os.Stat(filepath.Join(rootfs, "usr/bin/kmod")); err != nil {
		return "", fmt.Errorf("%s is not a real-host root filesystem (bash hack/realhost-rootfs.sh builds one): %w", rootfs, err)
	}
	entries, err := os.ReadDir(filepath.Join(rootfs, "lib/modules"))
	if err != nil || len(entries) != 1 {
		return "", fmt.Errorf("%s: want exactly one /lib/modules/<release> (%d found): %v", rootfs, len(entries), err)
	}
	return entries[0].Name(), nil
}

// AddReal creates node's host root as a writable overlay of rootfs (the
// node's writes go to <hosts>/.realhost/<node>, rootfs is never written)
// with spec's kernel and cards over it; spec.Kernel must be
// RealHostKernel(rootfs). Unmount removes the overlays.
func (h *Hosts) AddReal(node string, spec fakehost.Spec, rootfs string) (string, error) {
	spec.RealOS = true
	return h.add(node, spec, func(root string) error {
		layers := filepath.Join(h.Dir, ".realhost", node)
		upper, work := filepath.Join(layers, "upper"), filepath.Join(layers, "work")
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := "lowerdir=" + rootfs + ",upperdir=" + upper + ",workdir=" + work
		if err := syscall.Mount("overlay", root, "overlay", 0, opts); err != nil {
			return fmt.Errorf("tt hosts: %s: an overlay of the real-host root filesystem %s (needs root): %w", node, rootfs, err)
		}
		h.mu.Lock()
		h.mounts = append(h.mounts, root)
		h.mu.Unlock()
		return nil
	})
}

// Real reports whether node's host root is a real OS (AddReal).
func (h *Hosts) Real(node string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.real[node]
}

// Unmount detaches the real-host overlays (when the sim stops; a helper
// still running keeps its own view until it exits).
func (h *Hosts) Unmount() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []string
	for _, m := range h.mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", m, err))
		}
	}
	h.mounts = nil
	if len(errs) > 0 {
		return fmt.Errorf("tt hosts: unmount: %s", strings.Join(errs, "; "))
	}
	return nil
}

// WriteKMDRemote writes the stand-in tt-kmd's remote under simDir, one tag
// per version the fake git offers (fakehost.RemoteTags), and returns its
// file:// URL.
func WriteKMDRemote(simDir string) (string, error) {
	var versions []string
	for _, tag := range fakehost.RemoteTags {
		versions = append(versions, strings.TrimPrefix(tag, "ttkmd-"))
	}
	url, err := kmdrepo.Write(filepath.Join(simDir, KMDRemoteDir), versions...)
	if err != nil {
		return "", fmt.Errorf("tt hosts: the stand-in tt-kmd remote: %w", err)
	}
	return url, nil
}
