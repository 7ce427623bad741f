package fakehost

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Observed is what a fake host looks like now, for test assertions and for
// the simulator's node views.
type Observed struct {
	Kernel    string
	LoadedKMD string // "" when not loaded
	Refcnt    int
	// Firmware is the running fw bundle version per device, index order.
	Firmware []string
	// SPI is the bundle version each device boots on its next reset.
	SPI []string
	// PIDs are the fake processes still alive.
	PIDs      []int
	HostTTSMI string // version of <root>/usr/local/bin/tt-smi, "" if absent
	// HostTTSMIRuns reports the host's tt-smi starts with the host's glibc.
	HostTTSMIRuns bool
	// Wedged is true while tt-smi -s still needs a reset.
	Wedged bool
}

// Inspect reads the current state of the fake host at root.
func Inspect(root string) (Observed, error) {
	st, err := loadState(root)
	if err != nil {
		return Observed{}, err
	}
	o := Observed{
		Kernel:    st.Kernel,
		LoadedKMD: loadedVersion(root),
		Refcnt:    refcnt(root),
		HostTTSMI: ttsmiBinaryVersion(filepath.Join(root, hostSMIPath)),
		Wedged:    st.ResetsNeeded > 0,
	}
	if v, need := ttsmiBinary(filepath.Join(root, hostSMIPath)); v != "" {
		o.HostTTSMIRuns = glibcAtLeast(hostGlibc(root), need)
	}
	for _, d := range st.Devices {
		o.Firmware = append(o.Firmware, d.Firmware)
		o.SPI = append(o.SPI, d.spi())
	}
	entries, err := os.ReadDir(filepath.Join(root, "proc"))
	if err != nil {
		return Observed{}, err
	}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			o.PIDs = append(o.PIDs, pid)
		}
	}
	sort.Ints(o.PIDs)
	return o, nil
}
