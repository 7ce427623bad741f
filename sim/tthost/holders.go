package tthost

// Device holders on disk, in the format fakehost.Create writes and the node
// agent and fakehost's kill read: /proc/<pid>/{comm,cgroup,fd/N} with fd
// links into /dev/tenstorrent/, and the module refcount in
// /sys/module/tenstorrent/refcnt. fakehost has no API to add or remove a
// holder after Create, so these mirror its createProcesses and kill.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const (
	devDir      = "dev/tenstorrent"
	refcntPath  = "sys/module/tenstorrent/refcnt"
	versionPath = "sys/module/tenstorrent/version"
	devPrefix   = "/dev/tenstorrent/"
)

// holderProc is a fake process of a pod container with devices open.
type holderProc struct {
	PID         int
	Comm        string
	PodUID      string
	ContainerID string // 64 hex, as containerd names it
	Devices     []int
}

// containerID derives a stable containerd-style id for a pod's container.
func containerID(podUID, container string) string {
	sum := sha256.Sum256([]byte(podUID + "/" + container))
	return hex.EncodeToString(sum[:])
}

// moduleLoaded reports whether the fake tenstorrent module is loaded.
func moduleLoaded(root string) bool {
	b, err := os.ReadFile(filepath.Join(root, versionPath))
	return err == nil && strings.TrimSpace(string(b)) != ""
}

// deviceIndices lists the /dev/tenstorrent/<N> nodes that exist now.
func deviceIndices(root string) []int {
	entries, err := os.ReadDir(filepath.Join(root, devDir))
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// freePID returns the first pid >= from without a /proc entry.
func freePID(root string, from int) int {
	for pid := from; ; pid++ {
		if _, err := os.Lstat(procDir(root, pid)); errors.Is(err, os.ErrNotExist) {
			return pid
		}
	}
}

func procDir(root string, pid int) string {
	return filepath.Join(root, "proc", strconv.Itoa(pid))
}

// procAlive reports whether the fake process still exists (fakehost's kill
// removes its directory).
func procAlive(root string, pid int) bool {
	_, err := os.Stat(procDir(root, pid))
	return err == nil
}

// podCgroup renders /proc/<pid>/cgroup like the kubelet's systemd cgroup
// driver on cgroup v2 (fakehost's default layout).
func podCgroup(podUID, cid string) string {
	uid := strings.ReplaceAll(podUID, "-", "_")
	return "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid +
		".slice/cri-containerd-" + cid + ".scope\n"
}

// openHolder creates the process and, like open(2) on the device, raises
// the module refcount by one per device fd.
func openHolder(root string, h holderProc) error {
	if h.PID <= 1 || len(h.Devices) == 0 {
		return fmt.Errorf("holder pid %d with %d devices", h.PID, len(h.Devices))
	}
	dir := procDir(root, h.PID)
	if err := writeFile(filepath.Join(dir, "comm"), h.Comm+"\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "cgroup"), podCgroup(h.PodUID, h.ContainerID)); err != nil {
		return err
	}
	fdDir := filepath.Join(dir, "fd")
	if err := os.MkdirAll(fdDir, 0o755); err != nil {
		return err
	}
	for fd := 0; fd < 3; fd++ {
		if err := os.Symlink("/dev/null", filepath.Join(fdDir, strconv.Itoa(fd))); err != nil {
			return err
		}
	}
	for i, d := range h.Devices {
		if err := os.Symlink(devPrefix+strconv.Itoa(d), filepath.Join(fdDir, strconv.Itoa(3+i))); err != nil {
			return err
		}
	}
	return addRefcnt(root, len(h.Devices))
}

// closeHolder ends the process; its device fds drop the refcount, as
// fakehost's kill does. A process already gone is not an error.
func closeHolder(root string, pid int) error {
	dir := procDir(root, pid)
	held := deviceFDs(dir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return addRefcnt(root, -held)
}

func deviceFDs(dir string) int {
	entries, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if t, err := os.Readlink(filepath.Join(dir, "fd", e.Name())); err == nil && strings.HasPrefix(t, devPrefix) {
			n++
		}
	}
	return n
}

// addRefcnt changes the refcount of a loaded module (never below 0); with
// no module loaded there is nothing to count.
func addRefcnt(root string, delta int) error {
	if delta == 0 || !moduleLoaded(root) {
		return nil
	}
	p := filepath.Join(root, refcntPath)
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return writeFile(p, strconv.Itoa(max(0, n+delta))+"\n")
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
