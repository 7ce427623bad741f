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

// inspect reads pid's start time in clock ticks since boot (field 22 of
// /proc/PID/stat). Where /proc does not show the pid, kill(2) with signal 0
// says whether it exists: on a host without /proc an existing process
// counts as "running"; on one with /proc it is hidden from us (hidepid),
// and whether it is the holder's cannot be told.
func inspect(pid int) Process {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		if start := statStart(string(b)); start != "" {
			return Process{Known: true, Exists: true, Start: start}
		}
		return Process{}
	}
	switch kerr := syscall.Kill(pid, 0); {
	case errors.Is(kerr, syscall.ESRCH):
		return Process{Known: true}
	case kerr != nil && !errors.Is(kerr, syscall.EPERM):
		return Process{}
	}
	if _, err := os.Stat("/proc/self"); err == nil {
		return Process{} // exists, hidden from us
	}
	return Process{Known: true, Exists: true, Start: "running"}
}

// statStart is field 22 of a /proc/PID/stat line. The command name
// (field 2) may hold spaces; the fields after its ')' are fixed.
func statStart(s string) string {
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
