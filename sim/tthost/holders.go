package tthost

// Device holders on disk: fakehost's processes (/proc/<pid>/{comm,cgroup,
// fd/N} with fd links into /dev/tenstorrent/) and the module refcount in
// /sys/module/tenstorrent/refcnt.

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

	"github.com/rollbook/rollbook/internal/fakehost"
)

const (
	devDir      = "dev/tenstorrent"
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

// openHolder starts the pod container's fake process (fakehost.StartProcess:
// it appears whole, and raises the module refcount per device fd).
func openHolder(root string, h holderProc) error {
	if h.PID <= 1 || len(h.Devices) == 0 {
		return fmt.Errorf("holder pid %d with %d devices", h.PID, len(h.Devices))
	}
	return fakehost.StartProcess(root, fakehost.Holder{PID: h.PID, Comm: h.Comm, PodUID: h.PodUID, ContainerID: h.ContainerID,
		Devices: h.Devices})
}

// closeHolder ends the process as the kernel would (fakehost.EndProcess):
// fds first, then the whole /proc entry at once. A process already gone is
// not an error.
func closeHolder(root string, pid int) error { return fakehost.EndProcess(root, pid) }
