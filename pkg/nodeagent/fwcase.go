package nodeagent

import (
	"fmt"
	"strconv"
	"strings"
)

// FirmwareCase is how a bundle relates to what a chip runs. tt-flash
// decides on it per chip (flash.py, stage 1): a major downgrade is refused
// without --allow-major-downgrades, and any downgrade writes nothing
// without --force (the SPI already holds a newer bundle).
type FirmwareCase string

// The cases, named as every refusal names them.
const (
	CaseUpgrade        FirmwareCase = "upgrade"
	CaseSame           FirmwareCase = "same"
	CaseMinorDowngrade FirmwareCase = "minor downgrade"
	CaseMajorDowngrade FirmwareCase = "major downgrade"
	CaseUnknown        FirmwareCase = "unknown (the chip does not report its bundle version)"
)

// ClassifyFirmware relates target (the bundle's version, 3 or 4 parts) to
// running (a chip's readback, "?" when unknown).
func ClassifyFirmware(running, target string) FirmwareCase {
	r, okR := versionParts(running)
	t, okT := versionParts(target)
	if !okR || !okT {
		return CaseUnknown
	}
	for i := range r {
		if r[i] == t[i] {
			continue
		}
		switch {
		case r[i] < t[i]:
			return CaseUpgrade
		case i == 0:
			return CaseMajorDowngrade
		default:
			return CaseMinorDowngrade
		}
	}
	return CaseSame
}

func versionParts(v string) ([4]int, bool) {
	var out [4]int
	parts := strings.Split(strings.TrimSpace(v), ".")
	if len(parts) < 3 || len(parts) > 4 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// DescribeFirmwareCases names each device's case, "device 0 (n150) 19.4.0.0 → 18.5.0.0: major downgrade".
func DescribeFirmwareCases(devs []DeviceFirmware, target string) string {
	var s []string
	for i, d := range devs {
		s = append(s, fmt.Sprintf("device %d (%s) %s → %s: %s", i, orQ(d.Board), d.Version, target, ClassifyFirmware(d.Version, target)))
	}
	return strings.Join(s, "; ")
}

func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// CaseCount is how many chips are in one case.
type CaseCount struct {
	Case FirmwareCase
	N    int
}

// CountFirmwareCases counts running versions per case against target, in the
// order the cases first appear.
func CountFirmwareCases(running []string, target string) []CaseCount {
	var out []CaseCount
	at := map[FirmwareCase]int{}
	for _, v := range running {
		c := ClassifyFirmware(v, target)
		i, ok := at[c]
		if !ok {
			i = len(out)
			at[c] = i
			out = append(out, CaseCount{Case: c})
		}
		out[i].N++
	}
	return out
}
