package fakehost

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/ttflash"
)

// The fake tt-flash is held to every rule read from tt-flash's source
// (ttflash.Rules): what it refuses, writes and skips, and the flag its
// refusal names.
func TestFakeTTFlashFollowsTheRules(t *testing.T) {
	for _, r := range ttflash.Rules {
		t.Run(r.Name, func(t *testing.T) {
			d := Device{Firmware: r.Running, SPI: r.SPI, Board: "n150"}
			if r.Running == "N/A" {
				d = Device{Firmware: "18.2.0.0", Board: "n150", BundleUnreadable: true}
			}
			root := newRoot(t, Spec{LoadedKMD: "2.0.0", Devices: []Device{d}})
			bundle := filepath.Join(t.TempDir(), "b.fwbundle")
			if err := WriteBundle(bundle, r.Bundle); err != nil {
				t.Fatal(err)
			}
			code, out := invoke(t, root, append([]string{"tt-flash", "flash", "--fw-tar", bundle}, r.Flags.Argv()...)...)
			ops, err := Ops(root)
			if err != nil {
				t.Fatal(err)
			}
			wrote := len(ops) > 0
			switch r.Want.Outcome {
			case ttflash.Refuse:
				flag := "--force"
				if r.Want.Refusal == ttflash.RefuseMajorDowngrade {
					flag = "--allow-major-downgrades"
				}
				if code == 0 || wrote || !strings.Contains(out, flag) {
					t.Fatalf("%s: want a refusal naming %s, nothing written; exit %d, wrote %v\n%s", r.Source, flag, code, wrote, out)
				}
			case ttflash.Write:
				if code != 0 || !wrote {
					t.Fatalf("%s: want the chip written; exit %d, wrote %v\n%s", r.Source, code, wrote, out)
				}
			case ttflash.Skip:
				if code != 0 || wrote {
					t.Fatalf("%s: want nothing written, exit 0; exit %d, wrote %v\n%s", r.Source, code, wrote, out)
				}
			}
		})
	}
}
