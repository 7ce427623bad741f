package lease

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Local answers, for a holder recorded on a Lease, whether its process is
// provably alive or provably gone — possible only on the host it ran on.
type Local struct {
	Host   string
	BootID string
	// Start returns a process's start time as recorded in Holder.Start, or
	// "" when no such process exists.
	Start func(pid int) string
}

// ThisMachine describes the machine this process runs on.
func ThisMachine() *Local {
	host, _ := os.Hostname()
	return &Local{Host: host, BootID: bootID(), Start: processStart}
}

func (m *Local) sameMachine(h Holder) bool {
	return h.Host != "" && h.Host == m.Host && (h.BootID == "" || m.BootID == "" || h.BootID == m.BootID)
}

// Gone reports that the holder ran on this host and its process no longer exists (or
// the pid now belongs to another process, or the host rebooted since).
func (m *Local) Gone(h Holder) bool {
	if h.Host == "" || h.Host != m.Host {
		return false
	}
	if h.BootID != "" && m.BootID != "" && h.BootID != m.BootID {
		return true
	}
	if h.PID <= 0 {
		return false
	}
	start := m.Start(h.PID)
	return start == "" || (h.Start != "" && start != h.Start)
}

// Alive reports that the holder's very process still runs on this host.
func (m *Local) Alive(h Holder) bool {
	return m.sameMachine(h) && h.PID > 0 && h.Start != "" && m.Start(h.PID) == h.Start
}

// bootID identifies this boot of the host (Linux); "" elsewhere.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

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
