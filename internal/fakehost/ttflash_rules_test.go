package fakehost

import (
	"os"
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

// The fake tt-flash fails an SPI write as tt-flash does
// (ttflash.FailureSource): the chip's failure carries the phrase that
// hands the board to a person, the exit status counts the failed chips,
// the chips whose writes verified hold the bundle in their SPI, and no
// chip is reset (each still runs what it ran).
func TestFakeTTFlashSPIWriteFailureNeedsAPerson(t *testing.T) {
	for _, failing := range [][]int{{0}, {1}, {0, 2}, {0, 1, 2}} {
		devs := []Device{{Firmware: "18.2.0.0", Board: "n150"}, {Firmware: "18.2.0.0", Board: "n150"}, {Firmware: "18.2.0.0", Board: "n150"}}
		bad := map[int]bool{}
		for _, i := range failing {
			devs[i].SPIVerifyFails, bad[i] = true, true
		}
		root := newRoot(t, Spec{LoadedKMD: "2.0.0", Devices: devs})
		bundle := filepath.Join(t.TempDir(), "b.fwbundle")
		if err := WriteBundle(bundle, "18.3.0"); err != nil {
			t.Fatal(err)
		}
		code, out := invoke(t, root, "tt-flash", "--no-color", "flash", "--fw-tar", bundle)
		if code != len(failing) || !strings.Contains(out, ttflash.NeedsPersonMarker) || !strings.Contains(out, "FLASH FAILED") {
			t.Fatalf("%v failing: want exit %d with %q and FLASH FAILED; exit %d\n%s", failing, len(failing),
				ttflash.NeedsPersonMarker, code, out)
		}
		o, err := Inspect(root)
		if err != nil {
			t.Fatal(err)
		}
		for i := range devs {
			wantSPI := "18.3.0.0"
			if bad[i] {
				wantSPI = "18.2.0.0"
			}
			if o.Firmware[i] != "18.2.0.0" || o.SPI[i] != wantSPI {
				t.Errorf("%v failing: chip %d runs %s with %s in its SPI; want 18.2.0.0 (no reset) with %s",
					failing, i, o.Firmware[i], o.SPI[i], wantSPI)
			}
		}
	}
}

// A board left with a failed SPI write is not to be reset or flashed
// again until a person fixed it: the fake records either as
// EventFailedSPITouched (a sim violation), and nothing once fixed.
func TestFakeHostRecordsTouchingAFailedSPI(t *testing.T) {
	bundle := filepath.Join(t.TempDir(), "b.fwbundle")
	if err := WriteBundle(bundle, "18.3.0"); err != nil {
		t.Fatal(err)
	}
	touched := func(root string) int {
		evs, err := Events(root, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Kind == EventFailedSPITouched {
				n++
			}
		}
		return n
	}
	for _, again := range [][]string{{"tt-flash", "flash", "--fw-tar", bundle}, {"tt-smi", "-r"}} {
		root := newRoot(t, Spec{LoadedKMD: "2.0.0", Devices: []Device{{Board: "n150"}, {Board: "n150", SPIVerifyFails: true}}})
		if code, out := invoke(t, root, "tt-flash", "flash", "--fw-tar", bundle); code != 1 || touched(root) != 0 {
			t.Fatalf("the failing flash: exit %d, %d events\n%s", code, touched(root), out)
		}
		invoke(t, root, again...)
		if touched(root) != 1 {
			t.Fatalf("%v after a failed SPI write: %d events, want 1", again, touched(root))
		}
		if err := SetSPIVerifyFails(root, 1, false); err != nil {
			t.Fatal(err)
		}
		if code, out := invoke(t, root, "tt-flash", "flash", "--fw-tar", bundle); code != 0 || touched(root) != 1 {
			t.Fatalf("the flash after the fix: exit %d, %d events\n%s", code, touched(root), out)
		}
	}
}

// A card whose new image does not start: tt-flash's reset leaves it
// silent; then tt-smi -s fails device detection (tt_smi/tt_smi.py: "Error
// in detecting devices!", exit 1), tt-flash cannot detect it either, and
// its sysfs firmware does not read. A power cycle boots what the SPI holds.
func TestFakeCardThatBootsSilent(t *testing.T) {
	root := newRoot(t, Spec{LoadedKMD: "2.0.0", Devices: []Device{{Firmware: "18.2.0.0", Board: "n150"},
		{Firmware: "18.2.0.0", Board: "n150", BootsSilent: true}}})
	bundle := filepath.Join(t.TempDir(), "b.fwbundle")
	if err := WriteBundle(bundle, "18.3.0"); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "tt-flash", "--no-color", "flash", "--fw-tar", bundle); code != 0 {
		t.Fatalf("the flash itself succeeds: exit %d\n%s", code, out)
	}
	if code, out := invoke(t, root, "tt-smi", "-s"); code != 1 || !strings.Contains(out, "Error in detecting devices!") {
		t.Fatalf("tt-smi -s with a silent card: exit %d, want 1 and tt-smi's detection error\n%s", code, out)
	}
	if code, out := invoke(t, root, "tt-flash", "--no-color", "flash", "--fw-tar", bundle); code == 0 || !strings.Contains(out, "FLASH FAILED") {
		t.Fatalf("tt-flash with a silent card: exit %d, want a detection failure\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(root, classDir, "tenstorrent!1", "tt_fw_bundle_ver")); !os.IsNotExist(err) {
		t.Fatalf("the silent card's firmware reads in sysfs: %v", err)
	}
	if err := SetBootsSilent(root, 1, false); err != nil {
		t.Fatal(err)
	}
	if code, out := invoke(t, root, "tt-smi", "-s"); code != 0 || !strings.Contains(out, "18.3.0.0") {
		t.Fatalf("after the power cycle: exit %d, want the card at 18.3.0.0\n%s", code, out)
	}
}
