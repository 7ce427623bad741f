package fakehost

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// tt-flash [--no-color] [--no-tty] [flash] (--fw-tar PATH | PATH) [--force]
func ttFlash(t *tool) int {
	var bundle string
	force := false
	for i := 0; i < len(t.args); i++ {
		switch a := t.args[i]; a {
		case "--no-color", "--no-tty", "flash":
		case "--force":
			force = true
		case "--fw-tar":
			if i+1 >= len(t.args) {
				return t.errorf(2, "argument --fw-tar: expected one argument")
			}
			i++
			bundle = t.args[i]
		default:
			if strings.HasPrefix(a, "-") {
				return t.errorf(2, "unrecognized arguments: %s", a)
			}
			bundle = a
		}
	}
	if bundle == "" {
		return t.errorf(2, "one of the arguments fwbundle --fw-tar -d/--download is required")
	}
	out := t.stdout
	fmt.Fprintln(out, "Stage: SETUP")
	version, err := bundleVersion(bundle)
	if err != nil {
		fmt.Fprintf(out, "Error: %v\nFLASH FAILED\n", err)
		return 1
	}
	target := version + ".0"
	fmt.Fprintf(out, "\tFound bundle version %s\nStage: DETECT\n", version)
	if loadedVersion(t.root) == "" {
		fmt.Fprintln(out, "Error: No Tenstorrent driver detected!\nFLASH FAILED")
		return 1
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(1, "%v", err)
	}
	if who := holdersNow(t.root); who != "" {
		// A flash resets the chips under whoever has them open.
		t.recordEvent(EventFlashUnderHolder, "tt-flash while the device is held ("+who+")")
		fmt.Fprintf(out, "Error: device busy: /dev/tenstorrent is open (%s)\nFLASH FAILED\n", who)
		return 1
	}
	if st.ResetsNeeded > 0 {
		fmt.Fprintln(out, "Error: Timed out waiting for ARC to respond\nFLASH FAILED")
		return 1
	}
	fmt.Fprintf(out, "\tDetected %d chips\nStage: FLASH\n", len(st.Devices))
	for i := 0; i < st.FlashNoiseLines; i++ {
		fmt.Fprintf(out, "\t\tWriting block %d of %d (progress %d%%)\n", i, st.FlashNoiseLines, 100*i/max(st.FlashNoiseLines, 1))
	}
	time.Sleep(st.FlashDelay)
	rc := 0
	for i := range st.Devices {
		d := &st.Devices[i]
		switch {
		case !force && compareVersions(d.Firmware, target) >= 0:
			fmt.Fprintf(out, "\t%d: ROM version is %s; ROM does not need to be updated\n", i, d.Firmware)
		case d.FailFlash:
			fmt.Fprintf(out, "\t%d: Error: SPI write verify mismatch at 0x20000; chip %s not updated\n", i, busID(i))
			rc++
		default:
			fmt.Fprintf(out, "\t%d: Sub Stage: FLASH  Writing %s over %s\n", i, target, d.Firmware)
			t.recordOp(Op{Op: OpFlash, Chip: i, From: d.Firmware, Version: target})
			d.Firmware = target
		}
	}
	if err := saveState(t.root, st); err != nil {
		return t.errorf(1, "%v", err)
	}
	if err := renderDeviceAttrs(t.root, st); err != nil {
		return t.errorf(1, "%v", err)
	}
	if rc != 0 {
		fmt.Fprintln(out, "Errors detected on some chips; skipping reset\nFLASH FAILED")
		return rc
	}
	fmt.Fprintln(out, "Stage: RESET\n\tResetting devices, waiting for M3 boot")
	if st.ConfigSpaceResetBug {
		fmt.Fprintln(out, "\tConfig space reset not completed for device 0!")
	}
	fmt.Fprintln(out, "FLASH SUCCESS")
	return 0
}

// compareVersions compares dotted numeric versions; non-numbers sort lowest.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
