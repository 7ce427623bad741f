package fakehost

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rollbook/rollbook/pkg/ttkmd"
)

// stateDir holds what a real host keeps in silicon or the network (device
// firmware, the git remote, fault injection); everything the agent reads
// lives at its real path under the root.
const stateDir = ".fakehost"

// state is persisted as JSON so the fake tools, which run as separate
// processes, share it.
type state struct {
	Kernel              string        `json:"kernel"`
	Devices             []Device      `json:"devices"`
	MissingTags         []string      `json:"missingTags,omitempty"`
	BrokenBuild         bool          `json:"brokenBuild,omitempty"`
	ResetsNeeded        int           `json:"resetsNeeded,omitempty"` // 0 = healthy
	Galaxy              bool          `json:"galaxy,omitempty"`
	FlashDelay          time.Duration `json:"flashDelay,omitempty"`
	BuildDelay          time.Duration `json:"buildDelay,omitempty"`
	LoadDelay           time.Duration `json:"loadDelay,omitempty"`
	ConfigSpaceResetBug bool          `json:"configSpaceResetBug,omitempty"`
	SMISnapshotBroken   bool          `json:"smiSnapshotBroken,omitempty"`
	FlashNoiseLines     int           `json:"flashNoiseLines,omitempty"`
	// FlashKilledAfterWrite kills the next tt-flash after it wrote the SPI
	// and before its reset (once): the chips keep running the old image.
	FlashKilledAfterWrite bool `json:"flashKilledAfterWrite,omitempty"`
	// Writer is the pid of the tt-flash writing the SPI of the chips
	// Writing: killed then, it leaves them half-written
	// (CheckInterruptedFlash).
	Writer        int      `json:"writer,omitempty"`
	Writing       []int    `json:"writing,omitempty"`
	Unkillable    []int    `json:"unkillable,omitempty"`
	UnresolvedKMD []string `json:"unresolvedKMD,omitempty"`
	// TrustedCerts are the certificates (DER) in the kernel's keyrings
	// (built-in, secondary, platform/MOK): modules they signed load.
	TrustedCerts [][]byte `json:"trustedCerts,omitempty"`
}

func (st *state) trusted() []*x509.Certificate {
	var out []*x509.Certificate
	for _, der := range st.TrustedCerts {
		if c, err := x509.ParseCertificate(der); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func statePath(root string) string { return filepath.Join(root, stateDir, "state.json") }

func loadState(root string) (*state, error) {
	b, err := os.ReadFile(statePath(root))
	if err != nil {
		return nil, fmt.Errorf("fakehost state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("fakehost state: %w", err)
	}
	return &st, nil
}

func saveState(root string, st *state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(statePath(root), b, 0o644)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// Host paths, relative to the root, exactly where a real node has them.
const (
	moduleDir     = "sys/module/tenstorrent"
	devDir        = "dev/tenstorrent"
	classDir      = "sys/class/tenstorrent"
	pciDir        = "sys/bus/pci/devices"
	osreleasePath = "proc/sys/kernel/osrelease"
	kversionPath  = "proc/sys/kernel/version"
	cacheDir      = "var/cache/tt-kmd"
)

func busID(i int) string { return fmt.Sprintf("0000:%02x:00.0", i+1) }

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// loadedVersion is "" when the module is not loaded.
func loadedVersion(root string) string {
	v, _ := readTrim(filepath.Join(root, moduleDir, "version"))
	return v
}

func refcnt(root string) int {
	v, err := readTrim(filepath.Join(root, moduleDir, "refcnt"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}

func setRefcnt(root string, n int) error {
	if n < 0 {
		n = 0
	}
	// An unloaded module has no refcnt: a process that ends after the
	// unload (the sim's holder sync runs beside a test's reboot) must not
	// bring the module's directory back.
	if loadedVersion(root) == "" {
		return nil
	}
	return writeFile(filepath.Join(root, moduleDir, "refcnt"), strconv.Itoa(n)+"\n")
}

// loadModule makes the module appear as the kernel would: sysfs module dir,
// and for each card its probe binds (in bus order, the lowest free ordinal,
// as tt-kmd's xa_alloc gives) the driver links, a device node and the class
// attributes (which carry the firmware telemetry, so they only exist while
// the driver is bound).
func loadModule(root, version string, refs int, st *state) error {
	if err := writeFile(filepath.Join(root, moduleDir, "version"), version+"\n"); err != nil {
		return err
	}
	// The tag's build unless the loader says otherwise (setSrcVersion).
	if err := writeFile(filepath.Join(root, moduleDir, "srcversion"), fakeSrcVersion(version)+"\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, moduleDir, "initstate"), "live\n"); err != nil {
		return err
	}
	if err := setRefcnt(root, refs); err != nil {
		return err
	}
	bound := boundDevices(st, version)
	for ord, i := range bound {
		if err := writeFile(filepath.Join(root, devDir, strconv.Itoa(ord)), ""); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(root, devDir, strconv.Itoa(ord)), 0o600); err != nil {
			return err
		}
		if err := bindDriver(root, busID(i)); err != nil {
			return err
		}
	}
	if err := renderDeviceAttrs(root, st, bound); err != nil {
		return err
	}
	return udevByID(root, st, bound)
}

// boundDevices are the indices of st.Devices that version's probe binds,
// in ordinal order.
func boundDevices(st *state, version string) []int {
	var out []int
	for i, d := range st.Devices {
		if drives, _ := ttkmd.Drives(version, d.pciDevice()); drives && !slices.Contains(d.ProbeFailsOn, version) {
			out = append(out, i)
		}
	}
	return out
}

// pciDriverDir is the driver's sysfs directory: a link per bound function.
const pciDriverDir = "sys/bus/pci/drivers/tenstorrent"

// bindDriver writes the links the driver core makes for a bound PCI
// function: <dev>/driver to the driver, the driver's <bdf> to the device.
func bindDriver(root, bdf string) error {
	if err := os.MkdirAll(filepath.Join(root, pciDriverDir), 0o755); err != nil {
		return err
	}
	links := map[string]string{
		filepath.Join(root, pciDir, bdf, "driver"): "../../drivers/tenstorrent",
		filepath.Join(root, pciDriverDir, bdf):     "../../devices/" + bdf,
	}
	for link, target := range links {
		if err := os.Symlink(target, link); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// udevByID is what udev does for the devices when upstream tt-kmd's rule
// (udev-50-tenstorrent.rules) is installed: /dev/tenstorrent/by-id/
// <arch>-<asic id> links to each device node.
func udevByID(root string, st *state, bound []int) error {
	rule, err := os.ReadFile(filepath.Join(root, udevRulePath))
	if err != nil || !strings.Contains(string(rule), "tenstorrent/by-id/") {
		return nil
	}
	for ord, i := range bound {
		d := st.Devices[i]
		arch := "wormhole"
		if strings.HasPrefix(d.Board, "p") || d.Board == "tt-galaxy-bh" {
			arch = "blackhole"
		}
		link := filepath.Join(root, devDir, "by-id", fmt.Sprintf("%s-%016x", arch, 0x1e52_0000_0000+i))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("../"+strconv.Itoa(ord), link); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// udevRulePath is where the agent installs tt-kmd's udev rule.
const udevRulePath = "etc/udev/rules.d/50-tenstorrent.rules"

func renderDeviceAttrs(root string, st *state, bound []int) error {
	for ord, i := range bound {
		d := st.Devices[i]
		dir := filepath.Join(root, classDir, "tenstorrent!"+strconv.Itoa(ord))
		fw := filepath.Join(dir, "tt_fw_bundle_ver")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if d.Silent {
			// No telemetry at all: the real attributes exist but fail to
			// read; here they are absent, which a reader sees the same way.
			for _, f := range []string{fw, filepath.Join(dir, "tt_card_type")} {
				if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
		} else if st.ResetsNeeded > 0 || d.BundleUnreadable {
			// A hung chip cannot answer telemetry: the attribute reads fail.
			if err := os.Remove(fw); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		} else if err := writeFile(fw, d.Firmware+"\n"); err != nil {
			return err
		}
		if !d.Silent {
			if err := writeFile(filepath.Join(dir, "tt_card_type"), d.Board+"\n"); err != nil {
				return err
			}
		}
		link := filepath.Join(dir, "device")
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..", "..", "..", "bus", "pci", "devices", busID(i)), link); err != nil {
				return err
			}
		}
	}
	return nil
}

func unloadModule(root string) error {
	links, _ := filepath.Glob(filepath.Join(root, pciDir, "*", "driver"))
	for _, l := range links {
		if t, _ := os.Readlink(l); filepath.Base(t) == moduleName {
			if err := os.Remove(l); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{moduleDir, devDir, classDir, pciDriverDir} {
		// Again when a concurrent refcnt write lands between RemoveAll's
		// listing and its rmdir (ENOTEMPTY).
		var err error
		for range 5 {
			if err = os.RemoveAll(filepath.Join(root, p)); err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
