package nodeagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DeviceFirmware is one device's firmware bundle version as read back.
type DeviceFirmware struct {
	BusID   string
	Board   string
	Version string // "?" when the device did not report one
}

// ParseSMISnapshot extracts per-device fw_bundle_version from `tt-smi -s`
// output. tt-smi may print progress text first, so the JSON is taken from
// the first '{' that starts a valid document.
func ParseSMISnapshot(out []byte) ([]DeviceFirmware, error) {
	var snap struct {
		DeviceInfo *[]struct {
			BoardInfo struct {
				BusID     string `json:"bus_id"`
				BoardType string `json:"board_type"`
			} `json:"board_info"`
			Firmwares map[string]any `json:"firmwares"`
		} `json:"device_info"`
	}
	rest := out
	for tries := 0; ; tries++ {
		i := bytes.IndexByte(rest, '{')
		if i < 0 || tries == 16 {
			return nil, fmt.Errorf("tt-smi -s printed no snapshot JSON")
		}
		rest = rest[i:]
		if err := json.NewDecoder(bytes.NewReader(rest)).Decode(&snap); err == nil && snap.DeviceInfo != nil {
			break
		}
		rest = rest[1:]
	}
	if len(*snap.DeviceInfo) == 0 {
		return nil, fmt.Errorf("tt-smi -s reported no devices")
	}
	devs := make([]DeviceFirmware, 0, len(*snap.DeviceInfo))
	for _, d := range *snap.DeviceInfo {
		// Remote chips (an n300's second ASIC, behind the first over
		// Ethernet) have no PCI address; sysfs does not list them, and
		// tt-flash flashes them with their board. Devices are PCI ones.
		if strings.TrimSpace(d.BoardInfo.BusID) == "N/A" {
			continue
		}
		v, _ := d.Firmwares["fw_bundle_version"].(string)
		v = strings.TrimSpace(v)
		if v == "" || v == "N/A" { // tt-smi prints N/A for what it cannot read
			v = "?"
		}
		devs = append(devs, DeviceFirmware{BusID: d.BoardInfo.BusID, Board: strings.TrimSpace(d.BoardInfo.BoardType), Version: v})
	}
	return devs, nil
}

// readSysfsFirmware reads tt_fw_bundle_ver from each
// /sys/class/tenstorrent/tenstorrent!N, a tt-smi-free readback exported by
// tt-kmd.
func readSysfsFirmware(root string) ([]DeviceFirmware, error) {
	dir := filepath.Join(root, "sys/class/tenstorrent")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sysfs readback: %w", err)
	}
	type indexed struct {
		n int
		d DeviceFirmware
	}
	var found []indexed
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "tenstorrent!"))
		if err != nil {
			continue
		}
		devDir := filepath.Join(dir, e.Name())
		v, err := readTrimmed(filepath.Join(devDir, "tt_fw_bundle_ver"))
		if err != nil || v == "" {
			v = "?"
		}
		d := DeviceFirmware{Version: v}
		d.Board, _ = readTrimmed(filepath.Join(devDir, "tt_card_type"))
		if link, err := os.Readlink(filepath.Join(devDir, "device")); err == nil {
			d.BusID = filepath.Base(link)
		}
		found = append(found, indexed{n, d})
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("sysfs readback: no devices under /sys/class/tenstorrent")
	}
	sort.Slice(found, func(i, j int) bool { return found[i].n < found[j].n })
	devs := make([]DeviceFirmware, len(found))
	for i, f := range found {
		devs[i] = f.d
	}
	return devs, nil
}

// galaxyHost reports whether any Tenstorrent PCI function is a Galaxy UBB
// (subsystem 0x0035 Wormhole, 0x0047 Blackhole), whose chips are reset by
// tray power cycle (`tt-smi -glx_reset`) rather than `tt-smi -r`.
func galaxyHost(root string) bool {
	devs, _ := filepath.Glob(filepath.Join(root, "sys/bus/pci/devices/*"))
	for _, d := range devs {
		vendor, _ := readTrimmed(filepath.Join(d, "vendor"))
		sub, _ := readTrimmed(filepath.Join(d, "subsystem_device"))
		if vendor == "0x1e52" && (sub == "0x0035" || sub == "0x0047") {
			return true
		}
	}
	return false
}

func versionsOf(devs []DeviceFirmware) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Version
	}
	return out
}
