package nodeagent

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

const devicePrefix = "/dev/tenstorrent/"

// findHolders walks <root>/proc/*/fd for links into /dev/tenstorrent/, as
// the operator's entrypoint does (fuser under hostPID silently missed
// holders), and the dma-bufs and mappings that hold it without one.
// Processes that vanish or deny access mid-walk are skipped.
func findHolders(root string) ([]Holder, error) {
	entries, err := os.ReadDir(filepath.Join(root, "proc"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", filepath.Join(root, "proc"), err)
	}
	var holders []Holder
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(root, "proc", e.Name())
		via := holdsDevice(dir)
		if via == "" {
			continue
		}
		h := Holder{PID: pid, Via: via}
		h.Comm, _ = readTrimmed(filepath.Join(dir, "comm"))
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil && exited(dir) {
			// Gone since its fds were read: it holds nothing now, and
			// recording it without a cgroup would call a pod's process a
			// host process that no drain moves.
			continue
		}
		if err == nil {
			h.PodUID, h.ContainerID = parseCgroup(string(cg))
		}
		holders = append(holders, h)
	}
	sort.Slice(holders, func(i, j int) bool { return holders[i].PID < holders[j].PID })
	return holders, nil
}

// exited reports a /proc entry that is no longer there.
func exited(procDir string) bool {
	_, err := os.Lstat(procDir)
	return errors.Is(err, fs.ErrNotExist)
}

// holdsDevice says how the process at procDir holds a Tenstorrent device
// ("" when it does not): an open fd; from tt-kmd 2.10 on also, after
// close(), a dma-buf tenstorrent exported (its fd's fdinfo names the
// exporter, KBUILD_MODNAME) or a mapping of the device (the vma keeps the
// file): both keep the module busy with no /dev/tenstorrent fd left.
func holdsDevice(procDir string) string {
	fds, _ := os.ReadDir(filepath.Join(procDir, "fd"))
	dmabuf := false
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(procDir, "fd", fd.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(target, devicePrefix):
			return HeldByFD
		case !dmabuf && isDmaBuf(target):
			dmabuf = exportedByTenstorrent(filepath.Join(procDir, "fdinfo", fd.Name()))
		}
	}
	if dmabuf {
		return HeldByDmaBuf
	}
	if mapsDevice(filepath.Join(procDir, "maps")) {
		return HeldByMmap
	}
	return ""
}

// How a Holder holds the device (Holder.Via).
const (
	HeldByFD     = "fd"
	HeldByDmaBuf = "dma-buf"
	HeldByMmap   = "mmap"
)

// isDmaBuf: the kernel names a dma-buf's file "/dmabuf:<name>" (older
// kernels "anon_inode:dmabuf").
func isDmaBuf(link string) bool {
	return strings.HasPrefix(link, "/dmabuf:") || link == "anon_inode:dmabuf"
}

func exportedByTenstorrent(fdinfo string) bool {
	b, err := os.ReadFile(fdinfo)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "exp_name" && strings.TrimSpace(v) == kmdModuleName {
			return true
		}
	}
	return false
}

// mapsDevice reports a mapping of /dev/tenstorrent/* (the pathname is the
// sixth field of a maps line).
func mapsDevice(maps string) bool {
	f, err := os.Open(maps)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 6 && strings.HasPrefix(f[5], devicePrefix) {
			return true
		}
	}
	return false
}

var (
	// The kubelet's cgroupfs driver writes pod<uid>, the systemd driver
	// pod<uid with _ for ->.slice.
	podUIDRE = regexp.MustCompile(`pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})`)
	// Container cgroups end in the 64-hex runtime id, optionally wrapped as
	// <runtime>-<id>.scope.
	containerIDRE = regexp.MustCompile(`([0-9a-f]{64})(?:\.scope)?$`)
)

// parseCgroup extracts the pod UID and container ID from a
// /proc/<pid>/cgroup file (v1 or v2); both are "" for host processes.
func parseCgroup(content string) (podUID, containerID string) {
	for _, line := range strings.Split(content, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "kubepods") {
			continue
		}
		path := strings.TrimSpace(parts[2])
		if m := podUIDRE.FindStringSubmatch(path); m != nil {
			podUID = strings.ReplaceAll(strings.ToLower(m[1]), "_", "-")
		}
		if m := containerIDRE.FindStringSubmatch(path); m != nil {
			containerID = m[1]
		}
		if podUID != "" {
			return podUID, containerID
		}
	}
	return podUID, containerID
}

func describeHolders(hs []Holder) string {
	if len(hs) == 0 {
		return "none visible"
	}
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		s := fmt.Sprintf("pid %d (%s", h.PID, h.Comm)
		switch h.Via {
		case HeldByDmaBuf:
			s += ", through a dma-buf after close"
		case HeldByMmap:
			s += ", through an mmap after close"
		}
		if h.PodUID != "" {
			s += ", pod " + h.PodUID
		} else {
			s += ", host process"
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, "; ")
}
