package lease

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
)

// Local is what this machine can find out by itself about a holder
// recorded on a Lease: which host and boot it is, and what runs under a
// pid here. Only a holder that ran on this very host and boot can be
// judged from it; any other is judged by the Lease's expiry.
type Local struct {
	// MachineID and BootID identify this host and its current boot
	// (digests of /etc/machine-id and the kernel's boot ID, "" where the
	// system has none). A hostname identifies nothing: two machines may
	// share one.
	MachineID, BootID string
	// PIDNamespace is the pid namespace this process sees pids in (two
	// containers of one image on one host share machine and boot IDs,
	// not pids); "" where there is none.
	PIDNamespace string
	// Inspect tells what runs under a pid on this host. nil where
	// processes cannot be inspected.
	Inspect func(pid int) Process
}

// Process is what this host can tell of the process that has a pid now.
type Process struct {
	// Known is false when the host cannot tell (e.g. /proc mounted with
	// hidepid hides another user's process that kill(2) says exists).
	Known bool
	// Exists: some process has the pid now.
	Exists bool
	// Start identifies that process beyond its pid (Holder.Start), so a
	// pid reused by another process is told apart; "" when unreadable.
	Start string
}

// ThisMachine describes the machine this process runs on.
func ThisMachine() *Local {
	m := &Local{MachineID: machineID(), BootID: bootID(), PIDNamespace: pidNamespace()}
	if processesInspectable {
		m.Inspect = inspect
	}
	return m
}

// Facts are what this machine knows about holder h right now; the caller
// adds how long it has watched the Lease (Facts.Unchanged, Facts.Changed).
func (m *Local) Facts(h Holder) Facts {
	f := Facts{MachineID: m.MachineID, BootID: m.BootID, PIDNamespace: m.PIDNamespace}
	if m.Inspect != nil && h.PID > 0 {
		f.Process = m.Inspect(h.PID)
	}
	return f
}

// appID keys the digests of this host's identifiers: the Lease, which
// anyone who may read it sees, carries no raw machine ID (machine-id(5)
// asks applications not to expose it) and no value another application
// could correlate with its own.
const appID = "rollbook.dev/lease-holder"

func digest(id string) string {
	if id == "" {
		return ""
	}
	mac := hmac.New(sha256.New, []byte(id))
	mac.Write([]byte(appID))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// machineID identifies this host across reboots (systemd's machine-id,
// also written by dbus); "" where there is none.
func machineID() string {
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" && id != "uninitialized" {
				return digest(id)
			}
		}
	}
	return ""
}

// bootID identifies this boot of the host (Linux); "" elsewhere.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return digest(strings.TrimSpace(string(b)))
}

// pidNamespace names this process's pid namespace ("pid:[4026531836]",
// unique on a host while it exists); "" where there is none.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}
