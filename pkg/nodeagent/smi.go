package nodeagent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DefaultSMISource is where the helper image carries the tt-smi binary to
// deliver (the operator's builder image uses the same path).
const DefaultSMISource = "/usr/local/bin/tt-smi"

// hostSMIPath is the host's tt-smi, relative to the host root;
// stagedSMIPath is where the new one is written and tried first.
const (
	hostSMIPath   = "usr/local/bin/tt-smi"
	stagedSMIPath = "usr/local/bin/.tt-smi.new"
)

// SMIOptions configures a tt-smi delivery.
type SMIOptions struct {
	// Version is the tt-smi version Source must report.
	Version string
	// Source is the binary to install; default DefaultSMISource.
	Source string
	// Timeout bounds the operation; default 2 minutes.
	Timeout time.Duration
}

// SMI replaces the host's /usr/local/bin/tt-smi with Source atomically, so
// a concurrent `tt-smi -s` on the host runs the old or the new binary,
// never a partial one; then removes the pre-5.x /opt/tt virtualenv. Like
// the operator it refuses hosts whose driver is DKMS-managed.
func (a *Agent) SMI(ctx context.Context, o SMIOptions) Result {
	if o.Source == "" {
		o.Source = DefaultSMISource
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	x := a.begin(OpSMI, o.Version)
	if err := ValidateVersion(o.Version); err != nil {
		return x.finish(ctx, fail(ReasonInvalidInput, "--version: %v", err))
	}
	if !filepath.IsAbs(o.Source) {
		return x.finish(ctx, fail(ReasonInvalidInput, "--source %q must be an absolute path", o.Source))
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return x.finish(ctx, x.smi(ctx, o))
}

func (x *execution) smi(ctx context.Context, o SMIOptions) error {
	a := x.agent
	target := a.hostPath(hostSMIPath)
	if err := x.step("host-managed-check", func() (string, error) { return x.checkNotHostManaged() }); err != nil {
		return err
	}
	if err := x.step("packaged-check", func() (string, error) {
		found := a.findHostSMI()
		if s, ok := packagedSMI(found); ok {
			return "", fail(ReasonSMIPackaged, "%s", PackagedSMIRefusal(s))
		}
		return fmt.Sprintf("%d tt-smi on the host's PATH, none a package's", len(found)), nil
	}); err != nil {
		return err
	}
	var sum [32]byte
	if err := x.step("check-source", func() (string, error) {
		if same, _ := sameFile(o.Source, target); same {
			return "", fail(ReasonInvalidInput, "--source %s is the host's own tt-smi (is --host-root right?)", o.Source)
		}
		v, err := x.binaryVersion(ctx, o.Source, "--version")
		if err != nil {
			return "", fail(ReasonSMISourceInvalid, "source %s: %v", o.Source, err)
		}
		if v != o.Version {
			return "", fail(ReasonSMISourceInvalid, "source %s is tt-smi %s, expected %s", o.Source, v, o.Version)
		}
		if sum, err = fileSHA256(o.Source); err != nil {
			return "", fail(ReasonSMISourceInvalid, "source %s: %v", o.Source, err)
		}
		return "tt-smi " + v + " at " + o.Source, nil
	}); err != nil {
		return err
	}
	_ = x.step("read-current", func() (string, error) {
		if _, err := os.Stat(target); err != nil {
			return "no tt-smi on the host", nil
		}
		v, err := x.hostBinaryVersion(ctx, hostSMIPath)
		if err != nil {
			// An old binary that no longer runs here is not a reason to stop.
			return "current version unknown: " + err.Error(), nil
		}
		x.res.Before = v
		return "host has tt-smi " + v, nil
	})
	if cur, err := fileSHA256(target); err == nil && cur == sum {
		x.res.After = o.Version
		_ = x.step("install", func() (string, error) { return "already identical; not replaced", nil })
	} else {
		if err := x.step("stage", func() (string, error) { return x.stageSMI(ctx, o, sum) }); err != nil {
			return err
		}
		if err := x.step("install", func() (string, error) { return x.installSMI(target) }); err != nil {
			return err
		}
	}
	_ = x.step("remove-legacy-venv", func() (string, error) { return x.removeLegacyVenv() })
	return x.step("verify", func() (string, error) {
		v, err := x.hostBinaryVersion(ctx, hostSMIPath)
		if err != nil || v != o.Version {
			return "", fail(ReasonSMIInstallFailed, "installed tt-smi reports %q as the host runs it (%v), expected %s", v, err, o.Version)
		}
		x.res.After = v
		return "host tt-smi is " + v, nil
	})
}

// stageSMI writes the source next to the host's tt-smi and runs it there as
// the host would (chroot: the host's libc, not the helper image's), so a
// binary built for a newer glibc than the host's OS never replaces a
// working one.
func (x *execution) stageSMI(ctx context.Context, o SMIOptions, want [32]byte) (string, error) {
	staged := x.agent.hostPath(stagedSMIPath)
	f, err := os.Open(o.Source)
	if err != nil {
		return "", fail(ReasonSMISourceInvalid, "open %s: %v", o.Source, err)
	}
	defer f.Close()
	if err := replaceFile(staged, f, 0o755); err != nil {
		return "", fail(ReasonSMIInstallFailed, "write /%s: %v", stagedSMIPath, err)
	}
	if got, err := fileSHA256(staged); err != nil || got != want {
		os.Remove(staged)
		return "", fail(ReasonSMIInstallFailed, "/%s does not match the source (%v)", stagedSMIPath, err)
	}
	v, err := x.hostBinaryVersion(ctx, stagedSMIPath)
	if err != nil || v != o.Version {
		os.Remove(staged)
		return "", fail(ReasonSMIHostIncompatible, "tt-smi %s does not run on this host as the host runs it (%v, reported %q); "+
			"use the tt-smi flavour built for the host's OS release (its glibc)", o.Version, err, v)
	}
	return "staged /" + stagedSMIPath + "; it runs on the host as " + v, nil
}

// hostBinaryVersion runs the host's binary at rel (relative to the host
// root) as the host would: in a chroot of the host root, so with the
// host's libc.
func (x *execution) hostBinaryVersion(ctx context.Context, rel string) (string, error) {
	return x.binaryVersion(ctx, x.agent.asHost("/"+rel, "--version")...)
}

// asHost is argv run inside the host root (chroot), or as it is when the
// agent runs on the host itself.
func (a *Agent) asHost(argv ...string) []string {
	if a.Root == "/" || a.Root == "" {
		return argv
	}
	return append([]string{"chroot", a.Root}, argv...)
}

func (x *execution) installSMI(target string) (string, error) {
	if err := os.Rename(x.agent.hostPath(stagedSMIPath), target); err != nil {
		return "", fail(ReasonSMIInstallFailed, "rename over %s: %v", target, err)
	}
	if d, err := os.Open(filepath.Dir(target)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	x.res.Changed = true
	return "renamed over /" + hostSMIPath, nil
}

// removeLegacyVenv deletes /opt/tt, where pre-5.x builders installed a
// tt-smi virtualenv that could shadow the binary; only when it looks like
// that venv.
func (x *execution) removeLegacyVenv() (string, error) {
	dir := x.agent.hostPath("opt/tt")
	if _, err := os.Stat(filepath.Join(dir, "bin", "tt-smi")); err != nil {
		return "no legacy /opt/tt", nil
	}
	if err := os.RemoveAll(dir); err != nil {
		x.warn("could not remove legacy /opt/tt: %v", err)
		return "", err
	}
	x.res.Changed = true
	return "removed legacy /opt/tt", nil
}

var semverInText = regexp.MustCompile(`[0-9]+\.[0-9]+\.[0-9]+`)

// binaryVersion runs argv (`<path> --version`, maybe in a chroot; tt-smi
// prints its bare version).
func (x *execution) binaryVersion(ctx context.Context, argv ...string) (string, error) {
	cmd := strings.Join(argv, " ")
	r := x.run(ctx, argv)
	if r.err != nil {
		return "", fmt.Errorf("%s: %v: %s", cmd, r.err, keepTail(r.combined(), 300))
	}
	v := semverInText.FindString(r.stdout)
	if v == "" {
		return "", fmt.Errorf("%s printed no version: %q", cmd, keepHead(r.stdout, 200))
	}
	return v, nil
}

func fileSHA256(path string) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}
