package fakehost

import (
	"encoding/json"
	"fmt"
	"time"
)

// ImageTTSMIVersion is what the fake tt-smi on PATH (the helper image's
// copy) reports for --version.
const ImageTTSMIVersion = "5.2.0"

const noDriver = " No Tenstorrent driver detected! Please install driver using tt-kmd: https://github.com/tenstorrent/tt-kmd "

// tt-smi -v | -s [--snapshot_no_tty] | -r [idx…] | -glx_reset
func ttSMI(t *tool) int {
	if len(t.args) == 0 {
		return t.errorf(2, "fake tt-smi has no TUI; use -s, -r, -glx_reset or --version")
	}
	version := ImageTTSMIVersion
	if b := t.binary; b != nil {
		// PyInstaller's bootloader needs the glibc the binary was built on.
		if have := hostGlibc(t.root); !glibcAtLeast(have, b.glibc) {
			fmt.Fprintf(t.stderr, "[PYI-4242:ERROR] Failed to load Python shared library: "+
				"/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_%s' not found (required by %s)\n", b.glibc, b.path)
			return 255
		}
		version = b.version
	}
	switch t.args[0] {
	case "-v", "--version":
		fmt.Fprintln(t.stdout, version)
		return 0
	}
	// Like the real tool, a missing driver is reported on stdout.
	if loadedVersion(t.root) == "" {
		fmt.Fprintln(t.stdout, noDriver)
		return 1
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(1, "%v", err)
	}
	switch t.args[0] {
	case "-s", "--snapshot":
		return t.snapshot(st)
	case "-r", "--reset":
		return t.reset(st, false)
	case "-glx_reset", "--galaxy_6u_trays_reset":
		return t.reset(st, true)
	}
	return t.errorf(2, "fake tt-smi does not support %v", t.args)
}

func (t *tool) snapshot(st *state) int {
	if st.ResetsNeeded > 0 || anySilent(st) {
		// tt_smi.py: a chip that does not answer fails device detection.
		fmt.Fprintln(t.stdout, " Error in detecting devices!\nTimed out waiting for ARC to respond\n Exiting...")
		return 1
	}
	if st.SMISnapshotBroken {
		fmt.Fprintln(t.stderr,
			"Traceback (most recent call last):\n  File \"tt_smi/tt_smi.py\", line 912, in main\n"+
				"ImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found")
		return 1
	}
	snap := snapshotOf(t.root, st)
	b, err := json.MarshalIndent(snap, "", "    ")
	if err != nil {
		return t.errorf(1, "%v", err)
	}
	// Real tt-smi may print progress before the JSON; consumers must cope.
	fmt.Fprintf(t.stdout, "Detected Chips: %d\n%s\n", len(snap.DeviceInfo), b)
	return 0
}

// reset heals a wedged host only with the reset matching its hardware; like
// the real tool it exits 0 either way (tt-umd #2316).
func (t *tool) reset(st *state, galaxy bool) int {
	if galaxy && !st.Galaxy {
		fmt.Fprintln(t.stdout, " Error in resetting galaxy 6u trays!\nNo UBB trays found\n Exiting...")
		return 1
	}
	if galaxy {
		fmt.Fprintln(t.stdout, " Resetting galaxy 6u trays...")
	} else {
		fmt.Fprintln(t.stdout,
			" Starting PCI link reset on WH devices at PCI indices: all\n Finishing PCI link reset on WH devices\n"+
				" Re-initializing boards after reset....")
	}
	if failed := failedSPI(st); failed != "" {
		t.recordEvent(EventFailedSPITouched, "tt-smi reset a board whose chip(s) "+failed+" failed an SPI write tt-flash said "+
			"needs a person")
	}
	if galaxy == st.Galaxy {
		if st.ResetsNeeded > 0 {
			st.ResetsNeeded--
		}
		// A reset boots every chip from its SPI: a card flashed but not
		// reset now runs the new image.
		for i := range st.Devices {
			st.Devices[i].boot()
		}
		if err := saveState(t.root, st); err != nil {
			return t.errorf(1, "%v", err)
		}
		if err := renderDeviceAttrs(t.root, st, boundDevices(st, loadedVersion(t.root))); err != nil {
			return t.errorf(1, "%v", err)
		}
	}
	return 0
}

type snapshotJSON struct {
	Time       string            `json:"time"`
	HostInfo   map[string]string `json:"host_info"`
	HostSWVers map[string]string `json:"host_sw_vers"`
	DeviceInfo []deviceJSON      `json:"device_info"`
}

type deviceJSON struct {
	BoardInfo map[string]string `json:"board_info"`
	Telemetry map[string]string `json:"telemetry"`
	Firmwares map[string]string `json:"firmwares"`
	Limits    map[string]string `json:"limits"`
}

func snapshotOf(root string, st *state) snapshotJSON {
	snap := snapshotJSON{
		Time: time.Now().Format("2006-01-02T15:04:05.000000"),
		HostInfo: map[string]string{
			"OS": "Linux", "Distro": "Ubuntu 22.04.4 LTS", "Kernel": st.Kernel,
			"Hostname": "fakehost", "Platform": "x86_64", "Python": "3.10.12",
			"Memory": "503.55 GB", "Driver": "TT-KMD " + loadedVersion(root),
		},
		HostSWVers: map[string]string{"tt_smi": ImageTTSMIVersion, "pyluwen": "0.7.2"},
	}
	for i, d := range st.Devices {
		// tt-smi lists each PCI chip, then the chips behind it over
		// Ethernet (an n300's second ASIC), whose PCI fields read N/A.
		for r := 0; r <= d.remote(); r++ {
			bus, speed, width := busID(i), "4", "16"
			if r > 0 {
				bus, speed, width = "N/A", "N/A", "N/A"
			}
			fw := d.Firmware
			if d.BundleUnreadable {
				fw = "N/A"
			}
			snap.DeviceInfo = append(snap.DeviceInfo, deviceJSON{
				BoardInfo: map[string]string{
					"bus_id": bus, "board_type": d.Board, "board_id": fmt.Sprintf("10001451172%05d", i),
					"coords": "N/A", "dram_status": "True", "dram_speed": "12G", "pcie_speed": speed, "pcie_width": width,
				},
				Telemetry: map[string]string{"voltage": "0.80", "current": "22.0", "power": "18.0", "aiclk": "500",
					"asic_temperature": "45.3"},
				Firmwares: map[string]string{
					"fw_bundle_version": fw, "tt_flash_version": "3.6.5.0", "cm_fw": "0.0.0.0",
					"cm_fw_date": "2025-01-01", "eth_fw": "6.10.0", "bm_bl_fw": "129.2.0.0", "bm_app_fw": "5.10.0.0",
				},
				Limits: map[string]string{"vdd_min": "0.70", "vdd_max": "0.95", "tdp_limit": "85", "thm_limit": "75"},
			})
		}
	}
	return snap
}
