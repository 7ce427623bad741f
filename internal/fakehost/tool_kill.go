package fakehost

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// kill -KILL|-9|-s KILL PID…: ends fake processes (EndProcess): every
// device fd they held drops the module refcount, as closing them would in
// the kernel. It never signals a real process.

// devPrefix is where a device fd's link points.
const devPrefix = "/dev/tenstorrent/"

// dmabufLink is what /proc/<pid>/fd/N reads for a dma-buf (the kernel's
// dmabuffs_dname: "/dmabuf:" and the buffer's name, none here).
const dmabufLink = "/dmabuf:"

func kill(t *tool) int {
	args := t.args
	signal := ""
	switch {
	case len(args) >= 2 && args[0] == "-s":
		signal, args = args[1], args[2:]
	case len(args) >= 1 && strings.HasPrefix(args[0], "-"):
		signal, args = strings.TrimPrefix(args[0], "-"), args[1:]
	}
	if signal != "KILL" && signal != "9" && signal != "SIGKILL" {
		return t.errorf(2, "fake kill only sends KILL, got %q", signal)
	}
	if len(args) == 0 {
		return t.errorf(2, "usage: kill -KILL <pid>…")
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(1, "%v", err)
	}
	code := 0
	for _, a := range args {
		pid, err := strconv.Atoi(a)
		if err != nil || pid <= 0 {
			code = t.errorf(1, "failed to parse argument: '%s'", a)
			continue
		}
		dir := filepath.Join(t.root, "proc", strconv.Itoa(pid))
		if _, err := os.Stat(dir); err != nil {
			code = t.errorf(1, "(%d) - No such process", pid)
			continue
		}
		if slices.Contains(st.Unkillable, pid) {
			continue // D state: the signal is queued, nothing changes
		}
		if err := EndProcess(t.root, pid); err != nil {
			code = t.errorf(1, "(%d) - %v", pid, err)
		}
	}
	return code
}

func deviceFDs(procDir string) int {
	n := 0
	if entries, err := os.ReadDir(filepath.Join(procDir, "fd")); err == nil {
		for _, e := range entries {
			target, err := os.Readlink(filepath.Join(procDir, "fd", e.Name()))
			switch {
			case err != nil:
			case strings.HasPrefix(target, devPrefix):
				n++
			case target == dmabufLink:
				info, _ := os.ReadFile(filepath.Join(procDir, "fdinfo", e.Name()))
				if strings.Contains(string(info), "exp_name:\t"+moduleName+"\n") {
					n++
				}
			}
		}
	}
	maps, _ := os.ReadFile(filepath.Join(procDir, "maps"))
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) == 6 && strings.HasPrefix(f[5], devPrefix) {
			n++
		}
	}
	return n
}
