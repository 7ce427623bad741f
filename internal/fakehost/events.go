package fakehost

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Event kinds the fake tools record when a host is mistreated. A simulator
// turns them into safety violations; the tools themselves only observe.
const (
	EventRmmodUnderHolder = "rmmod-under-holder"
	EventFlashUnderHolder = "flash-under-holder"
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
