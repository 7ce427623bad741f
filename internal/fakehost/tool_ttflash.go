package fakehost

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rollbook/rollbook/pkg/ttflash"
)

// tt-flash [--no-color] [--no-tty] [flash] (--fw-tar PATH | PATH) [--force]
// [--allow-major-downgrades] [--no-reset]. As tt-flash's flash.py: per
// chip, the running and the SPI bundle versions decide, by the rules
// pkg/ttflash reads from it (ttflash.Decide; the contract test holds the
// fake to ttflash.Rules); a chip whose SPI is at or above the bundle is not
// written (unless --force) and not reset, so it keeps running what it ran;
// only written chips are reset, and only then run the new image.
func ttFlash(t *tool) int {
	var bundle string
	force, allowMajorDowngrade, noReset := false, false, false
	for i := 0; i < len(t.args); i++ {
		switch a := t.args[i]; a {
		case "--no-color", "--no-tty", "flash":
		case "--force":
			force = true
		case "--allow-major-downgrades":
			allowMajorDowngrade = true
		case "--no-reset":
			noReset = true
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
	b, err := readBundle(bundle)
	if err != nil {
		fmt.Fprintf(out, "Error: %v\nFLASH FAILED\n", err)
		return 1
	}
	target := b.version
	fmt.Fprintf(out, "\tFound bundle version %s\nStage: DETECT\n", target)
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
	if st.ResetsNeeded > 0 || anySilent(st) {
		// A chip whose firmware does not answer fails detect_chips.
		fmt.Fprintln(out, "Error: Timed out waiting for ARC to respond\nFLASH FAILED")
		return 1
	}
	fmt.Fprintf(out, "\tDetected %d chips\n", len(st.Devices))
	// Stage 1 decides per chip before anything is written.
	write := make([]bool, len(st.Devices))
	for i, d := range st.Devices {
		running, spi := ttflash.Parse(d.Firmware), ttflash.Parse(d.spi())
		if d.BundleUnreadable {
			running, spi = ttflash.Version{}, ttflash.Version{}
		}
		dec := ttflash.Decide(running, spi, ttflash.Parse(target), ttflash.Flags{Force: force, AllowMajorDowngrades: allowMajorDowngrade})
		switch dec.Refusal {
		case ttflash.RefuseNoRunning:
			fmt.Fprintf(out, "Error: chip %d reports no running bundle version; it can be flashed only with --force\nFLASH FAILED\n", i)
			return 1
		case ttflash.RefuseMajorDowngrade:
			fmt.Fprintf(out, "Error: Detected major version downgrade from %s to %s, this is not supported. "+
				"If you really want to do this please re-run with --allow-major-downgrades\nFLASH FAILED\n", d.Firmware, target)
			return 1
		case ttflash.RefuseFwID:
			fmt.Fprintf(out, "Error: Bundle fwId (%d) does not match expected fwId (%d); %s != %s bypass with --force\nFLASH FAILED\n",
				ttflash.Parse(target).Major(), running.Major(), target, d.Firmware)
			return 1
		}
		// The image is looked for only for a chip it will write.
		if dir := bundleBoards[d.Board]; dec.Outcome == ttflash.Write && !b.boards[dir] {
			fmt.Fprintf(out, "Error: Could not find flash image for %s in tarfile; expected to see %s/image.bin\nFLASH FAILED\n",
				d.Board, dir)
			return 1
		}
		switch {
		case dec.Outcome == ttflash.Write:
			write[i] = true
		case running.Known() && running.Compare(ttflash.Parse(target)) < 0:
			fmt.Fprintf(out, "\t%d: ROM does not need to be updated, while the chip is running old FW the SPI is up to date. "+
				"You can load the new firmware after a reboot, or in the case of WH a reset. Or skip this check with --force.\n", i)
		default:
			fmt.Fprintf(out, "\t%d: ROM version is %s; ROM does not need to be updated\n", i, d.Firmware)
		}
	}
	fmt.Fprintln(out, "Stage: FLASH")
	if failed := failedSPI(st); failed != "" && slices.Contains(write, true) {
		t.recordEvent(EventFailedSPITouched, "tt-flash wrote a board whose chip(s) "+failed+" failed an SPI write tt-flash said "+
			"needs a person")
	}
	for i := 0; i < st.FlashNoiseLines; i++ {
		fmt.Fprintf(out, "\t\tWriting block %d of %d (progress %d%%)\n", i, st.FlashNoiseLines, 100*i/max(st.FlashNoiseLines, 1))
	}
	// The SPI writes take FlashDelay, all chips at once (tt-flash's pool):
	// a kill in that window leaves them half-written, which the host
	// remembers (CheckInterruptedFlash).
	st.Writing = nil
	for i := range st.Devices {
		if write[i] && !st.Devices[i].FailFlash && !st.Devices[i].SPIVerifyFails {
			st.Writing = append(st.Writing, i)
		}
	}
	if len(st.Writing) > 0 {
		st.Writer = os.Getpid()
		if err := saveState(t.root, st); err != nil {
			return t.errorf(1, "%v", err)
		}
	}
	time.Sleep(st.FlashDelay)
	st.Writer, st.Writing = 0, nil
	rc, written := 0, 0
	for i := range st.Devices {
		d := &st.Devices[i]
		switch {
		case !write[i]:
		case d.FailFlash:
			fmt.Fprintf(out, "\t%d: Error: SPI write verify mismatch at 0x20000; chip %s not updated\n", i, busID(i))
			rc++
		case d.SPIVerifyFails:
			// As flash_chip_stage2: write, verify, write again, verify
			// again; the second mismatch hands the board to a person.
			fmt.Fprintf(out, "\t%d: Writing new firmware... SUCCESS\n\t\tInitial verification: failed\n"+
				"\t\tWrote the firmware once more\n\t\tSecond verification failed: %s, contact support\n", i, ttflash.NeedsPersonMarker)
			d.SPIFailed = true
			rc++
		default:
			fmt.Fprintf(out, "\t%d: Sub Stage: FLASH  Writing %s over %s\n", i, target, d.spi())
			t.recordOp(Op{Op: OpFlash, Chip: i, From: d.Firmware, Version: target})
			d.SPI = target
			written++
		}
	}
	if written > 0 && st.FlashKilledAfterWrite {
		// The helper was killed (timeout, eviction, node agent restart)
		// between the SPI write and the reset: tt-flash ignores SIGINT
		// there, not SIGKILL.
		st.FlashKilledAfterWrite = false
		if err := saveState(t.root, st); err != nil {
			return t.errorf(1, "%v", err)
		}
		fmt.Fprintln(t.stderr, "Killed")
		return 137
	}
	if rc != 0 {
		// main.py: one failed chip and no chip is reset, the written ones
		// included.
		fmt.Fprintln(out, "Errors detected on some chips; skipping reset\nFLASH FAILED")
	} else if written > 0 && !noReset {
		fmt.Fprintln(out, "Stage: RESET\n\tResetting devices, waiting for M3 boot")
		for i := range st.Devices {
			if write[i] {
				st.Devices[i].boot()
			}
		}
		if st.ConfigSpaceResetBug {
			fmt.Fprintln(out, "\tConfig space reset not completed for device 0!")
		}
	}
	if err := saveState(t.root, st); err != nil {
		return t.errorf(1, "%v", err)
	}
	if err := renderDeviceAttrs(t.root, st, boundDevices(st, loadedVersion(t.root))); err != nil {
		return t.errorf(1, "%v", err)
	}
	if rc != 0 {
		return rc
	}
	fmt.Fprintln(out, "FLASH SUCCESS")
	return 0
}

// failedSPI names the chips with a failed SPI write not fixed since, ""
// when none.
func failedSPI(st *state) string {
	var s []string
	for i, d := range st.Devices {
		if d.SPIFailed {
			s = append(s, strconv.Itoa(i))
		}
	}
	return strings.Join(s, ",")
}
