package nodeagent

import (
	"fmt"
	"strings"

	"github.com/rollbook/rollbook/pkg/ttflash"
)

// FirmwareCase is how a bundle relates to what a chip runs, as tt-flash
// decides it per chip (pkg/ttflash): it picks the flags the flash passes
// and names each device in every refusal.
type FirmwareCase = ttflash.Case

// The cases, named as every refusal names them.
const (
	CaseUpgrade           = ttflash.CaseUpgrade
	CaseSame              = ttflash.CaseSame
	CaseMinorDowngrade    = ttflash.CaseMinorDowngrade
	CaseMajorDowngrade    = ttflash.CaseMajorDowngrade
	CaseMultiMajorUpgrade = ttflash.CaseMultiMajorUpgrade
	CaseNoRunning         = ttflash.CaseNoRunning
)

// ClassifyFirmware relates target (the bundle's version, 3 or 4 parts) to
// running (a chip's readback, "?" when unknown), the pre-18 80.x scheme
// normalised as tt-flash does.
func ClassifyFirmware(running, target string) FirmwareCase { return ttflash.Classify(running, target) }

// NeedsForceConsent reports whether case c makes tt-flash refuse without
// --force for a reason the request alone does not settle: an upgrade
// across more than one major, or a chip with no running version. --force
// also skips tt-flash's board checks, so the user must ask for it
// (--force-write). A minor downgrade needs --force too, but only because
// the SPI holds a newer bundle: asking for the older version is the
// consent; a major downgrade has its own flag.
func NeedsForceConsent(c FirmwareCase) bool {
	return c == CaseMultiMajorUpgrade || c == CaseNoRunning
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
