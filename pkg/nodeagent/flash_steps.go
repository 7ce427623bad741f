package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// maxBundleBytes caps a downloaded bundle; real ones are a few MiB.
const maxBundleBytes = 512 << 20

// snapshot runs `tt-smi -s` and parses it.
func (x *execution) snapshot(ctx context.Context) ([]DeviceFirmware, error) {
	r := x.run(ctx, []string{"tt-smi", "-s"})
	if r.err != nil {
		// tt-smi prints its real errors ("No Tenstorrent driver detected!")
		// on stdout, so keep both streams.
		return nil, toolFailure(ReasonReadbackFailed, r, "tt-smi -s")
	}
	devs, err := ParseSMISnapshot([]byte(r.stdout))
	if err != nil {
		return nil, failOutput(ReasonReadbackFailed, r, "tt-smi -s: %v", err)
	}
	return devs, nil
}

func describeFirmware(devs []DeviceFirmware) string {
	return fmt.Sprintf("%d device(s): %s", len(devs), strings.Join(versionsOf(devs), " "))
}

// readbackBefore reads every device's firmware version. If tt-smi fails it
// resets once (the operator's heal) and retries, then falls back to the
// kmd's sysfs telemetry. With ContinueOnReadbackFailure an unreadable host
// is flashed blind (nil devices).
func (x *execution) readbackBefore(ctx context.Context, o FlashOptions) ([]DeviceFirmware, error) {
	var devs []DeviceFirmware
	var last error
	read := func() (string, error) {
		var err error
		devs, err = x.snapshot(ctx)
		last = err
		if err != nil {
			return "", err
		}
		return describeFirmware(devs), nil
	}
	if x.step("readback", read) == nil {
		return devs, nil
	}
	_ = x.step("heal", func() (string, error) { return x.heal(ctx, o.ResetSettle) })
	if x.step("readback-retry", read) == nil {
		return devs, nil
	}
	if x.step("readback-sysfs", func() (string, error) {
		var err error
		if devs, err = readSysfsFirmwareStrict(x.agent.Root); err != nil {
			return "", err
		}
		return describeFirmware(devs), nil
	}) == nil {
		x.warn("tt-smi -s failed after a reset; using sysfs tt_fw_bundle_ver")
		return devs, nil
	}
	if ctx.Err() != nil {
		return nil, last
	}
	// Some cards answer and some do not (tt-kmd keeps their nodes, sysfs
	// reads no firmware): those fail tt-flash's detection too, so no flash
	// reaches them, blind or not. After a flash that left them so, this is
	// the re-run's answer. Every card silent is the wedged host the heal is
	// for (more resets may bring it back): that stays a failed readback.
	if all, err := readSysfsFirmware(x.agent.Root); err == nil {
		var silent []string
		for i, d := range all {
			if d.Version == "?" {
				silent = append(silent, fmt.Sprintf("device %d (%s)", i, d.BusID))
			}
		}
		if len(silent) > 0 && len(silent) < len(all) {
			return nil, silentCards(silent, "also after a reset", "tt-flash cannot reach it either", "")
		}
	}
	if o.ContinueOnReadbackFailure {
		x.warn("pre-flash readback failed after one reset; flashing without knowing current versions")
		return nil, nil
	}
	return nil, appendMsg(last, " (after one reset and a sysfs fallback)")
}

// readSysfsFirmwareStrict treats any device without telemetry as a failed
// readback: a hung chip keeps its sysfs node but cannot report.
func readSysfsFirmwareStrict(root string) ([]DeviceFirmware, error) {
	devs, err := readSysfsFirmware(root)
	if err != nil {
		return nil, err
	}
	for i, d := range devs {
		if d.Version == "?" {
			return nil, fmt.Errorf("device %d (%s) has no tt_fw_bundle_ver", i, d.BusID)
		}
	}
	return devs, nil
}

// heal issues the reset the hardware needs; its exit code is ignored
// because tt-smi reports 0 even when a reset failed. Re-reading is the
// only trustworthy check.
func (x *execution) heal(ctx context.Context, settle time.Duration) (string, error) {
	argv := []string{"tt-smi", "-r"}
	if galaxyHost(x.agent.Root) {
		argv = []string{"tt-smi", "-glx_reset"}
	}
	var r toolRun
	if err := x.critical(ctx, "a reset of the chips", func(ctx context.Context) error {
		r = x.run(ctx, argv)
		return nil
	}); err != nil {
		return "", err
	}
	if r.notFound() {
		return "", toolFailure(ReasonReadbackFailed, r, "reset")
	}
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(settle):
	}
	return strings.Join(argv, " ") + fmt.Sprintf(" (exit %d), settled %s", r.exitCode, settle), nil
}

// readbackAfter reads versions after tt-flash; tt-smi first, sysfs if it
// fails, since the purpose now is the verdict, not the heal.
func (x *execution) readbackAfter(ctx context.Context) ([]DeviceFirmware, error) {
	var devs []DeviceFirmware
	err := x.step("readback-after", func() (string, error) {
		var err error
		var smiErr error
		if devs, smiErr = x.snapshot(ctx); smiErr == nil {
			return describeFirmware(devs), nil
		}
		if devs, err = readSysfsFirmware(x.agent.Root); err != nil {
			return "", smiErr
		}
		x.warn("post-flash tt-smi -s failed; verified with sysfs tt_fw_bundle_ver")
		return describeFirmware(devs) + " (sysfs)", nil
	})
	return devs, err
}

// fetchBundle makes the bundle available as a local file: file:// URLs are
// used in place, https is downloaded into WorkDir. With BundleSHA256 the
// bytes are checked before tt-flash sees them: a download that does not
// match never becomes a file, a local one is refused.
func (x *execution) fetchBundle(ctx context.Context, o FlashOptions) (path, detail string, err error) {
	shown := RedactURL(o.BundleURL)
	u, err := url.Parse(o.BundleURL)
	if err != nil {
		return "", "", fail(ReasonInvalidInput, "--bundle-url does not parse (not shown: it may hold credentials)")
	}
	pinned := ""
	if o.BundleSHA256 != "" {
		pinned = ", SHA-256 " + strings.ToLower(o.BundleSHA256) + " verified"
	} else {
		x.warn("no --bundle-sha256: the bundle's integrity rests on its URL alone")
	}
	if u.Scheme == "file" {
		fi, err := os.Stat(u.Path)
		if err != nil || !fi.Mode().IsRegular() {
			return "", "", fail(ReasonBundleFetchFailed, "bundle %s is not a readable file: %v", u.Path, err)
		}
		if o.BundleSHA256 != "" {
			got, err := fileHexSHA256(u.Path)
			if err != nil {
				return "", "", fail(ReasonBundleFetchFailed, "bundle %s: %v", u.Path, err)
			}
			if got != strings.ToLower(o.BundleSHA256) {
				return "", "", fail(ReasonBundleChecksumMismatch, "bundle %s: %v; refusing to flash it",
					u.Path, &digestMismatch{got: got, want: strings.ToLower(o.BundleSHA256)})
			}
		}
		return u.Path, "using " + u.Path + pinned, nil
	}
	dir := o.WorkDir
	if dir == "" {
		dir = os.TempDir()
	}
	dst := filepath.Join(dir, "fw_pack-"+o.Version+".fwbundle")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.BundleURL, nil)
	if err != nil {
		return "", "", fail(ReasonBundleFetchFailed, "download %s: the request cannot be made", shown)
	}
	resp, err := x.agent.httpClient().Do(req)
	if err != nil {
		return "", "", fail(ReasonBundleFetchFailed, "download %s: %s", shown, scrubURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fail(ReasonBundleFetchFailed, "download %s: HTTP %s", shown, resp.Status)
	}
	body := newCheckedReader(io.LimitReader(resp.Body, maxBundleBytes), o.BundleSHA256)
	if err := replaceFile(dst, body, 0o644); err != nil {
		var dm *digestMismatch
		if errors.As(err, &dm) {
			return "", "", fail(ReasonBundleChecksumMismatch, "download %s: %v; nothing was written or flashed", shown, dm)
		}
		return "", "", fail(ReasonBundleFetchFailed, "download %s: %s", shown, scrubURLError(err))
	}
	return dst, "downloaded " + shown + pinned, nil
}

// scrubURLError is err's message without the URL net/http puts in it
// (a *url.Error quotes the full URL, query included).
func scrubURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " " + RedactURL(ue.URL) + ": " + ue.Err.Error()
	}
	return err.Error()
}
