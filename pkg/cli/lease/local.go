package lease

import (
	"os"
	"strings"
)

// Local answers, for a holder recorded on a Lease, whether its process is
// provably alive or provably gone — possible only on the host it ran on.
type Local struct {
	Host   string
	BootID string
	// Start returns a process's start time as recorded in Holder.Start, or
	// "" when no such process exists. nil where processes cannot be
	// inspected: holders are then judged by lease expiry alone.
	Start func(pid int) string
}

// ThisMachine describes the machine this process runs on.
func ThisMachine() *Local {
	host, _ := os.Hostname()
	m := &Local{Host: host, BootID: bootID()}
	if processesInspectable {
		m.Start = processStart
	}
	return m
}

func (m *Local) sameMachine(h Holder) bool {
	return h.Host != "" && h.Host == m.Host && (h.BootID == "" || m.BootID == "" || h.BootID == m.BootID)
}

// Gone reports that the holder ran on this host and its process no longer exists (or
// the pid now belongs to another process, or the host rebooted since).
func (m *Local) Gone(h Holder) bool {
	if m.Start == nil || h.Host == "" || h.Host != m.Host {
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
	return m.Start != nil && m.sameMachine(h) && h.PID > 0 && h.Start != "" && m.Start(h.PID) == h.Start
}

// bootID identifies this boot of the host (Linux); "" elsewhere.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
