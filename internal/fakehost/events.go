package fakehost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Event kinds the fake tools record when a host is mistreated. A simulator
// turns them into safety violations; the tools themselves only observe.
const (
	EventRmmodUnderHolder = "rmmod-under-holder"
	EventFlashUnderHolder = "flash-under-holder"
	// EventFlashInterrupted: a tt-flash died while it wrote a chip's SPI
	// (SIGKILL, or SIGTERM, which tt-flash does not catch), leaving a
	// half-written image the chip would boot at its next reset.
	EventFlashInterrupted = "flash-interrupted"
	// EventFailedSPITouched: a board with a chip whose SPI write tt-flash
	// failed (it says: do not reset or power off, contact support) was
	// reset or flashed again before the fix (SetSPIVerifyFails(false)).
	EventFailedSPITouched = "failed-spi-touched"
)

// Event is something unsafe a fake tool was asked to do.
type Event struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

func eventsPath(root string) string { return filepath.Join(root, stateDir, "events.log") }

// recordEvent appends an event; a host that cannot record it says so on
// stderr rather than hiding it.
func (t *tool) recordEvent(kind, detail string) {
	if err := appendLine(eventsPath(t.root), Event{Kind: kind, Detail: detail}); err != nil {
		fmt.Fprintf(t.stderr, "fakehost: cannot record %s: %v\n", kind, err)
	}
}

// Events returns the events recorded on root after the first skip ones,
// so a reader can poll with the count it has already seen.
func Events(root string, skip int) ([]Event, error) { return readLines[Event](eventsPath(root), skip) }

// deviceHolders lists the pids with a /dev/tenstorrent/* fd open, read
// from the host's own process table.
func deviceHolders(root string) []int {
	entries, err := os.ReadDir(filepath.Join(root, "proc"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && deviceFDs(filepath.Join(root, "proc", e.Name())) > 0 {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// holdersNow describes who holds the device, or "" when nobody does: open
// fds in the process table, or a refcount the table does not explain.
func holdersNow(root string) string {
	pids := deviceHolders(root)
	var parts []string
	for _, p := range pids {
		parts = append(parts, strconv.Itoa(p))
	}
	switch {
	case len(pids) > 0:
		return "pids " + strings.Join(parts, ",")
	case loadedVersion(root) != "" && refcnt(root) > 0:
		return fmt.Sprintf("module refcnt %d", refcnt(root))
	}
	return ""
}

// CheckInterruptedFlash records EventFlashInterrupted (once) when the
// tt-flash that was writing root's chips is gone without finishing: killed
// mid-write. The chips it wrote keep a half-written SPI (FailFlash from
// then on: tt-flash reports them, as a chip that no longer boots the
// image). A host nobody flashes says nothing.
func CheckInterruptedFlash(root string) error {
	st, err := loadState(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil || st.Writer == 0 || processRuns(st.Writer) {
		return err
	}
	chips := fmt.Sprint(st.Writing)
	for _, i := range st.Writing {
		if i < len(st.Devices) {
			st.Devices[i].FailFlash = true
		}
	}
	pid := st.Writer
	st.Writer, st.Writing = 0, nil
	if err := saveState(root, st); err != nil {
		return err
	}
	t := &tool{root: root, stderr: os.Stderr}
	t.recordEvent(EventFlashInterrupted, fmt.Sprintf("tt-flash (pid %d) died while writing the SPI of chip(s) %s: "+
		"a half-written image (a helper killed mid-flash)", pid, chips))
	return nil
}

// processRuns: pid names a live process (not a zombie) of this machine.
func processRuns(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true // no /proc: kill(2) said it exists
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// FlashWriting reports a tt-flash writing root's chips now.
func FlashWriting(root string) bool {
	st, err := loadState(root)
	return err == nil && st.Writer != 0 && processRuns(st.Writer)
}
