package fakehost

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// StartProcess adds a process holding h's devices to a running fake host,
// as a container starting does: its /proc entry appears whole (built aside,
// then renamed in), and each device fd raises the module refcount.
func StartProcess(root string, h Holder) error {
	if h.PID <= 1 {
		return fmt.Errorf("fakehost: process pid %d: must be > 1", h.PID)
	}
	if err := writeProcess(root, h); err != nil {
		return err
	}
	if loadedVersion(root) == "" {
		return nil
	}
	return setRefcnt(root, refcnt(root)+len(devicesOf(h)))
}

// EndProcess ends a fake process the way the kernel does: its fds close
// first (each device fd drops the module refcount), then its /proc entry
// vanishes at once. A reader walking /proc never sees a live process with
// a device open and part of its entry gone. A process already gone is not
// an error.
func EndProcess(root string, pid int) error {
	dir := filepath.Join(root, "proc", strconv.Itoa(pid))
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return nil
	}
	held := deviceFDs(dir)
	for _, p := range []string{"fd", "fdinfo", "maps"} { // an exiting process's files and mappings go first
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			return err
		}
	}
	if held > 0 && loadedVersion(root) != "" {
		if err := setRefcnt(root, refcnt(root)-held); err != nil {
			return err
		}
	}
	gone := filepath.Join(root, "proc", ".exited-"+strconv.Itoa(pid))
	if err := os.RemoveAll(gone); err != nil {
		return err
	}
	if err := os.Rename(dir, gone); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}

// writeProcess lays out /proc/<pid>/{comm,cgroup,fd/N} under a name no
// /proc walker reads as a pid, then renames it into place.
func writeProcess(root string, h Holder) error {
	dir := filepath.Join(root, "proc", strconv.Itoa(h.PID))
	tmp := filepath.Join(root, "proc", ".starting-"+strconv.Itoa(h.PID))
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	comm := h.Comm
	if comm == "" {
		comm = "python3"
	}
	if err := writeFile(filepath.Join(tmp, "comm"), comm+"\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(tmp, "cgroup"), cgroupFile(h)); err != nil {
		return err
	}
	fdDir := filepath.Join(tmp, "fd")
	if err := os.MkdirAll(fdDir, 0o755); err != nil {
		return err
	}
	// fd 0-2 are the usual non-device files.
	for fd := 0; fd < 3; fd++ {
		if err := os.Symlink("/dev/null", filepath.Join(fdDir, strconv.Itoa(fd))); err != nil {
			return err
		}
	}
	var maps []string
	for i, dev := range devicesOf(h) {
		fd := strconv.Itoa(3 + i)
		switch h.Via {
		case HoldMmap: // the fd was closed; the mapping keeps the file
			maps = append(maps, fmt.Sprintf("7f%02x00000000-7f%02x00100000 rw-s 00000000 00:05 %d                          %s%d",
				i, i, 1000+dev, devPrefix, dev))
		case HoldDmaBuf: // what the kernel names a dma-buf file, and its fdinfo
			if err := os.Symlink(dmabufLink, filepath.Join(fdDir, fd)); err != nil {
				return err
			}
			info := fmt.Sprintf("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t%d\nsize:\t2097152\ncount:\t1\nexp_name:\t%s\nname:\t\n",
				2000+dev, moduleName)
			if err := writeFile(filepath.Join(tmp, "fdinfo", fd), info); err != nil {
				return err
			}
		default:
			if err := os.Symlink(devPrefix+strconv.Itoa(dev), filepath.Join(fdDir, fd)); err != nil {
				return err
			}
		}
	}
	maps = append(maps, "7f5500000000-7f5500021000 r-xp 00000000 08:01 4242                       /usr/lib/x86_64-linux-gnu/libc.so.6")
	if err := writeFile(filepath.Join(tmp, "maps"), strings.Join(maps, "\n")+"\n"); err != nil {
		return err
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("fakehost: process %d already exists", h.PID)
	}
	return os.Rename(tmp, dir)
}

func devicesOf(h Holder) []int {
	if h.Devices == nil {
		return []int{0}
	}
	return h.Devices
}

// Churn starts and ends a process holding h's devices under each of pids
// in turn, over and over, until the returned stop is called; stop reports
// the first error. For tests of readers walking /proc while pods come and go.
func Churn(root string, h Holder, pids []int) (stop func() error) {
	quit, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-quit:
				done <- nil
				return
			default:
			}
			h.PID = pids[i%len(pids)]
			if err := StartProcess(root, h); err != nil {
				done <- err
				return
			}
			if err := EndProcess(root, h.PID); err != nil {
				done <- err
				return
			}
		}
	}()
	return func() error { close(quit); return <-done }
}
