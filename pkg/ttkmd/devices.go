// Package ttkmd holds what tt-kmd releases do that rollbook decides on
// before it touches a node: which Tenstorrent PCI devices a version drives.
package ttkmd

import (
	"fmt"
	"strconv"
	"strings"
)

// A chip is a Tenstorrent PCI device id and the tt-kmd versions whose id
// table binds it, from tt-kmd's module.c (tenstorrent_ids) and
// enumerate.c (tenstorrent_pci_probe):
//   - Wormhole (0x401e): every release;
//   - Blackhole (0xb140): from ttkmd-1.31 ("Minimal Black Hole support");
//   - Grayskull (0xfaca): until 2.2.0, whose table keeps the id with no
//     device class ("refactor: Deprecate Grayskull"), so the probe says
//     "Unsupported device" and returns -ENODEV.
type chip struct {
	id, name     string
	since, until string // until: the first version that no longer drives it; "" = none
}

var chips = []chip{
	{id: "0x401e", name: "Wormhole"},
	{id: "0xb140", name: "Blackhole", since: "1.31"},
	{id: "0xfaca", name: "Grayskull", until: "2.2.0"},
}

// VendorID is Tenstorrent's PCI vendor id.
const VendorID = "0x1e52"

// ChipName names a Tenstorrent PCI device id ("Blackhole"), "" when
// tt-kmd has never known it.
func ChipName(device string) string {
	for _, c := range chips {
		if c.id == strings.ToLower(device) {
			return c.name
		}
	}
	return ""
}

// Drives reports whether tt-kmd version binds PCI device id device (as
// sysfs prints it, "0x401e"); when not, why says so and which versions do.
// A version it cannot read is taken to drive every known chip.
func Drives(version, device string) (ok bool, why string) {
	for _, c := range chips {
		if c.id != strings.ToLower(device) {
			continue
		}
		if c.since != "" && Less(version, c.since) {
			return false, fmt.Sprintf("tt-kmd drives %s (1e52:%s) from %s", c.name, strings.TrimPrefix(c.id, "0x"), c.since)
		}
		if c.until != "" && !Less(version, c.until) {
			return false, fmt.Sprintf("tt-kmd dropped %s (1e52:%s) in %s (\"Unsupported device\")", c.name,
				strings.TrimPrefix(c.id, "0x"), c.until)
		}
		return true, ""
	}
	return false, fmt.Sprintf("no tt-kmd release drives PCI device 1e52:%s", strings.TrimPrefix(strings.ToLower(device), "0x"))
}

// Less orders tt-kmd versions numerically, part by part ("1.34" < "1.34.1"
// < "2.0.0"); a version that is not numeric orders last.
func Less(a, b string) bool {
	pa, oka := parts(a)
	pb, okb := parts(b)
	if !oka || !okb {
		return oka && !okb
	}
	for i := range max(len(pa), len(pb)) {
		x, y := at(pa, i), at(pb, i)
		if x != y {
			return x < y
		}
	}
	return false
}

func parts(v string) ([]int, bool) {
	var out []int
	for _, p := range strings.Split(v, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

func at(p []int, i int) int {
	if i < len(p) {
		return p[i]
	}
	return 0
}
