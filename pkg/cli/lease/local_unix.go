//go:build unix

package lease

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

const processesInspectable = true

// processStart is the start time of pid in clock ticks since boot (field 22
// of /proc/PID/stat), "" when there is no such process. Where /proc is
// missing it falls back to "running" for a process that exists.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, statErr := os.Stat("/proc/self"); statErr == nil {
				return "" // a Linux host without that process
			}
			if syscall.Kill(pid, 0) == nil {
				return "running"
			}
		}
		return ""
	}
	// The command name (field 2) may hold spaces; fields after its ')' are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
