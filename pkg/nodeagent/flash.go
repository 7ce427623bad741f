package nodeagent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollbook/rollbook/pkg/ttflash"
)

// FlashOptions configures a firmware flash.
type FlashOptions struct {
	// Version is the firmware bundle version (tt-system-firmware release).
	Version string
	// BundleURL defaults to the tt-system-firmware release asset.
	BundleURL string
	// BundleSHA256 pins the bundle's bytes (hex); a mismatch refuses
	// before anything is written or flashed. Empty skips the check.
	BundleSHA256 string
	// ReadbackVersion is what every device must report afterwards;
	// default "<Version>.0".
	ReadbackVersion string
	// ForceWrite flashes even when every device already reports the
	// readback version, and passes --force to tt-flash.
	ForceWrite bool
	// ContinueOnReadbackFailure flashes blind when the pre-flash readback
	// still fails after one reset.
	ContinueOnReadbackFailure bool
	// AllowMajorDowngrade lets a chip running a newer major version be
	// flashed: tt-flash --allow-major-downgrades (and --force, which its
	// fwId check needs across majors). Without it the agent refuses first.
	// ForceWrite is the consent for the other cases tt-flash refuses
	// without --force (ttflash.CaseMultiMajorUpgrade, CaseNoRunning).
	AllowMajorDowngrade bool
	// Homogenize is kept for the helper's argv: chips that disagree are
	// brought together by the flags their cases need (ttflash.Case.Needs),
	// never by a --force tt-flash does not need.
	Homogenize bool
	// WorkDir receives the downloaded bundle; default os.TempDir().
	WorkDir string
	// ResetSettle is the pause after a healing reset; default 5s.
	ResetSettle time.Duration
	// Timeout bounds the operation; default 15 minutes (Galaxy headroom).
	Timeout time.Duration
	// ForceUnload SIGKILLs processes holding the device before the flash;
	// without it a held device stops the flash (a reset under a live
	// process corrupts its work and can wedge the host).
	ForceUnload bool
	// UnloadWait bounds the wait for the refcount to drop after the kill.
	UnloadWait time.Duration
}

// DefaultBundleURL is the tt-system-firmware release asset for version.
func DefaultBundleURL(version string) string {
	return DefaultBundleURLPrefix + "v" + version + "/fw_pack-" + version + ".fwbundle"
}

// DefaultBundleURLPrefix is where every tt-system-firmware release asset is.
const DefaultBundleURLPrefix = "https://github.com/tenstorrent/tt-system-firmware/releases/download/"

// configSpaceResetMarker in tt-flash output means the post-flash reset
// failed even though tt-flash exits 0 (tt-smi #88, tt-ansible failed_when).
const configSpaceResetMarker = "Config space reset not completed"

func (o *FlashOptions) defaults() {
	if o.BundleURL == "" && o.Version != "" {
		o.BundleURL = DefaultBundleURL(o.Version)
	}
	if o.ReadbackVersion == "" && o.Version != "" {
		o.ReadbackVersion = o.Version + ".0"
	}
	if o.ResetSettle <= 0 {
		o.ResetSettle = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Minute
	}
	if o.UnloadWait <= 0 {
		o.UnloadWait = 10 * time.Second
	}
}

func (o FlashOptions) validate() error {
	if err := ValidateVersion(o.Version); err != nil {
		return fail(ReasonInvalidInput, "--version: %v", err)
	}
	if err := ValidateReadbackVersion(o.ReadbackVersion); err != nil {
		return fail(ReasonInvalidInput, "--readback-version: %v", err)
	}
	if err := ValidateSourceURL(o.BundleURL); err != nil {
		return fail(ReasonInvalidInput, "--bundle-url: %v", err)
	}
	if err := ValidateSHA256(o.BundleSHA256); err != nil {
		return fail(ReasonInvalidInput, "--bundle-sha256: %v", err)
	}
	return nil
}

// Flash runs the operator's flash.sh sequence: readback (one healing reset
// if it fails), skip when already at the readback version, fetch the
// bundle, tt-flash, then require every device to read back the target.
func (a *Agent) Flash(ctx context.Context, o FlashOptions) Result {
	o.defaults()
	x := a.begin(OpFlash, o.ReadbackVersion)
	if err := o.validate(); err != nil {
		return x.finish(ctx, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return x.finish(ctx, x.flash(x.stoppable(ctx), o))
}

func (x *execution) flash(ctx context.Context, o FlashOptions) error {
	before, err := x.readbackBefore(ctx, o)
	if err != nil {
		return err
	}
	x.res.Devices = devicesFrom(before, nil, o.ReadbackVersion)
	versions := versionsOf(before)
	if !o.ForceWrite && len(before) > 0 && allEqual(versions, o.ReadbackVersion) {
		return x.step("skip", func() (string, error) {
			return "all devices already at " + o.ReadbackVersion + "; skipping flash", nil
		})
	}
	need, consent := flagsFor(before, o.ReadbackVersion)
	if need.AllowMajorDowngrades && !o.AllowMajorDowngrade {
		return x.step("downgrade-check", func() (string, error) {
			return "", fail(ReasonMajorDowngrade, "%s; tt-flash refuses a major downgrade without --allow-major-downgrades: "+
				"re-run with --allow-major-downgrade if this bundle is really wanted (nothing was flashed)",
				DescribeFirmwareCases(before, o.ReadbackVersion))
		})
	}
	if consent && !o.ForceWrite {
		return x.step("force-check", func() (string, error) {
			return "", fail(ReasonNeedsForce, "%s; tt-flash refuses these without --force, which also skips its board checks: "+
				"re-run with --force-write if this bundle is really wanted on them (nothing was flashed)",
				DescribeFirmwareCases(before, o.ReadbackVersion))
		})
	}
	// The flags are the least tt-flash needs for every chip (a downgrade
	// writes nothing without --force: the SPI holds a newer bundle), plus
	// --force when asked. Chips that disagree need nothing more: each one
	// below the bundle is written, one above it is a downgrade (forced),
	// one at it is already there — so Homogenize adds no --force.
	need.Force = need.Force || o.ForceWrite
	if err := x.step("holders", func() (string, error) { return x.checkFlashHolders(ctx, o) }); err != nil {
		return err
	}
	var bundle string
	if err := x.step("fetch-bundle", func() (detail string, err error) {
		bundle, detail, err = x.fetchBundle(ctx, o)
		return detail, err
	}); err != nil {
		return err
	}
	argv := append([]string{"tt-flash", "--no-color", "flash", "--fw-tar", bundle}, need.Argv()...)
	x.res.Changed = true
	flashErr := x.step("tt-flash", func() (string, error) {
		var r toolRun
		// tt-flash cut short leaves a chip's SPI half-written: asked to
		// stop, it finishes writing (and resetting) first.
		if err := x.critical(ctx, "tt-flash writing the chips", func(ctx context.Context) error {
			r = x.run(ctx, argv, configSpaceResetMarker, ttflash.NeedsPersonMarker)
			return nil
		}); err != nil {
			return "", err
		}
		x.res.OutputTail = r.combined()
		if r.err != nil && r.seen[ttflash.NeedsPersonMarker] {
			// tt-flash's exit status is the number of chips it failed.
			return "", failOutput(ReasonFlashNeedsPerson, r, "tt-flash could not write the SPI of %d chip(s) (its second "+
				"verification failed, exit %d) and says not to reset or power off the board and to contact Tenstorrent "+
				"support; tt-flash reset no chip, so the chips it did write still run their old firmware", r.exitCode, r.exitCode)
		}
		if r.err != nil {
			return "", toolFailure(ReasonFlashFailed, r, "tt-flash")
		}
		if r.seen[configSpaceResetMarker] {
			return "", failOutput(ReasonConfigSpaceReset, r, "tt-flash exited 0 but reported %q: the chips did not come back cleanly",
				configSpaceResetMarker)
		}
		return strings.Join(argv, " "), nil
	})
	// Read back even after a failed flash: per-device detail tells the
	// human which chip to look at.
	after, readErr := x.readbackAfter(ctx)
	if flashErr == nil && readErr == nil && len(after) > 0 && !allEqual(versionsOf(after), o.ReadbackVersion) {
		// tt-flash writes nothing and resets nothing where the SPI already
		// holds the bundle: a card flashed earlier but never reset still
		// runs its old image until a reset loads the SPI.
		if x.step("reset-to-load", func() (string, error) { return x.heal(ctx, o.ResetSettle) }) == nil {
			after, readErr = x.readbackAfter(ctx)
		}
	}
	if after != nil {
		x.res.Devices = devicesFrom(before, after, o.ReadbackVersion)
	}
	if flashErr != nil {
		return withDeviceDetail(flashErr, x.res.Devices, o.ReadbackVersion)
	}
	if readErr != nil {
		return readErr
	}
	return x.step("verify", func() (string, error) { return verifyDevices(before, after, o.ReadbackVersion, x.res.Devices) })
}

// checkFlashHolders refuses to reset chips someone has open, unless asked
// to kill the holders first.
func (x *execution) checkFlashHolders(ctx context.Context, o FlashOptions) (string, error) {
	a := x.agent
	refs, _ := readInt(a.hostPath(filepath.Join(moduleSysfs, "refcnt")))
	holders, err := findHolders(a.Root)
	if err != nil {
		return "", err
	}
	if refs == 0 && len(holders) == 0 {
		return "no process holds /dev/tenstorrent", nil
	}
	x.res.Holders = holders
	if !o.ForceUnload {
		return "", fail(ReasonDeviceInUse, "/dev/tenstorrent is held (refcnt %d; holders: %s); a flash resets the chips under them. "+
			"Drain the node or use --force-unload", refs, describeHolders(holders))
	}
	return x.killHolders(ctx, o.UnloadWait, max(refs, 1))
}

func verifyDevices(before, after []DeviceFirmware, want string, devs []Device) (string, error) {
	if len(after) < len(before) {
		return "", fail(ReasonDeviceMissing, "%d device(s) before the flash, %d after: a device did not come back from reset",
			len(before), len(after))
	}
	var bad, silent []string
	for _, d := range devs {
		switch {
		case !d.OK && d.After == "?":
			silent = append(silent, fmt.Sprintf("device %d (%s)", d.Index, d.BusID))
		case !d.OK:
			bad = append(bad, fmt.Sprintf("device %d (%s) reads %s", d.Index, d.BusID, d.After))
		}
	}
	if len(silent) > 0 {
		// tt-flash waits for each chip's firmware to boot after its reset
		// (flash.py: m3_delay), and a second reset did not bring these
		// back: no re-flash helps a card that does not answer.
		also := ""
		if len(bad) > 0 {
			also = "; also " + strings.Join(bad, "; ")
		}
		return "", silentCards(silent, "after the reset that loads "+want, "the chip's firmware did not start"+also,
			": a card that then reads "+want+" is done without another write")
	}
	if len(bad) > 0 {
		return "", fail(ReasonFirmwareMismatch, "expected %s on every device (%s); %s", want, describeCases(devs, want),
			strings.Join(bad, "; "))
	}
	return fmt.Sprintf("%d device(s) read back %s", len(devs), want), nil
}

// withDeviceDetail names the devices that did not reach the target.
func withDeviceDetail(err error, devs []Device, want string) error {
	var bad []string
	for _, d := range devs {
		if !d.OK {
			bad = append(bad, fmt.Sprintf("device %d (%s) at %s", d.Index, d.BusID, d.After))
		}
	}
	if len(bad) == 0 {
		return err
	}
	// A chip that fails makes tt-flash skip the reset of all of them, so on
	// a Galaxy every chip is behind: name a few, count the rest (the
	// message must leave room for the tool's output in the result).
	if n := len(bad); n > 4 {
		bad = append(bad[:4], fmt.Sprintf("and %d more", n-4))
	}
	return appendMsg(err, "; not at target: "+strings.Join(bad, ", ")+" ("+describeCases(devs, want)+")")
}

// flagsFor is the union of the tt-flash flags every chip's case needs, and
// whether one of them needs --force only the user can consent to.
func flagsFor(devs []DeviceFirmware, want string) (need ttflash.Flags, consent bool) {
	for _, d := range devs {
		c := ClassifyFirmware(d.Version, want)
		need = need.Or(c.Needs())
		consent = consent || NeedsForceConsent(c)
	}
	return need, consent
}

// describeCases names the cases the devices were in before the flash,
// "upgrade", "minor downgrade ×2", so a failure says which path it took.
func describeCases(devs []Device, want string) string {
	before := make([]string, len(devs))
	for i, d := range devs {
		before[i] = d.Before
	}
	var s []string
	for _, c := range CountFirmwareCases(before, want) {
		s = append(s, fmt.Sprintf("%s on %d device(s)", c.Case, c.N))
	}
	return "before the flash: " + strings.Join(s, ", ")
}

// devicesFrom pairs before/after readbacks by position (tt-smi and sysfs
// both list devices in PCI order).
func devicesFrom(before, after []DeviceFirmware, want string) []Device {
	n := max(len(before), len(after))
	devs := make([]Device, n)
	for i := range devs {
		d := Device{Index: i}
		if i < len(before) {
			d.BusID, d.Board, d.Before = before[i].BusID, before[i].Board, before[i].Version
		}
		if i < len(after) {
			d.BusID, d.Board, d.After = after[i].BusID, after[i].Board, after[i].Version
			d.OK = after[i].Version == want
		}
		if after == nil {
			d.OK = d.Before == want
		}
		devs[i] = d
	}
	return devs
}

func allEqual(vs []string, want string) bool {
	for _, v := range vs {
		if v != want {
			return false
		}
	}
	return true
}

// silentCards is the verdict on cards (named "device N (bus)") that do not
// answer when, with why: tt-kmd keeps their nodes, but no tool reads their
// firmware, no flash reaches them, and only a power cycle brings them back.
func silentCards(cards []string, when, why, then string) error {
	return fail(ReasonDeviceSilent, "%s does not answer %s: tt-kmd keeps its device node, but neither tt-smi nor sysfs "+
		"reads its firmware (%s). Power the host off and on (a cold boot resets the card's power), then re-run the same "+
		"command%s", strings.Join(cards, ", "), when, why, then)
}
