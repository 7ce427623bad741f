package nodeagent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// DefaultSMISource is where the helper image carries the tt-smi binary to
// deliver (the operator's builder image uses the same path).
const DefaultSMISource = "/usr/local/bin/tt-smi"

// hostSMIPath is the host's tt-smi, relative to the host root.
const hostSMIPath = "usr/local/bin/tt-smi"

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
	var sum [32]byte
	if err := x.step("check-source", func() (string, error) {
		if same, _ := sameFile(o.Source, target); same {
			return "", fail(ReasonInvalidInput, "--source %s is the host's own tt-smi (is --host-root right?)", o.Source)
		}
		v, err := x.binaryVersion(ctx, o.Source)
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
		v, err := x.binaryVersion(ctx, target)
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
	} else if err := x.step("install", func() (string, error) { return x.installSMI(o.Source, target, sum) }); err != nil {
		return err
	}
	_ = x.step("remove-legacy-venv", func() (string, error) { return x.removeLegacyVenv() })
	return x.step("verify", func() (string, error) {
		v, err := x.binaryVersion(ctx, target)
		if err != nil || v != o.Version {
			return "", fail(ReasonSMIInstallFailed, "installed tt-smi reports %q (%v), expected %s", v, err, o.Version)
		}
		x.res.After = v
		return "host tt-smi is " + v, nil
	})
}

func (x *execution) installSMI(source, target string, want [32]byte) (string, error) {
	f, err := os.Open(source)
	if err != nil {
		return "", fail(ReasonSMISourceInvalid, "open %s: %v", source, err)
	}
	defer f.Close()
	if err := replaceFile(target, f, 0o755); err != nil {
		return "", fail(ReasonSMIInstallFailed, "replace %s: %v", target, err)
	}
	got, err := fileSHA256(target)
	if err != nil || got != want {
		return "", fail(ReasonSMIInstallFailed, "%s does not match the source after rename (%v)", target, err)
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

// binaryVersion runs `<path> --version` (tt-smi prints its bare version).
func (x *execution) binaryVersion(ctx context.Context, path string) (string, error) {
	r := x.agent.run(ctx, []string{path, "--version"})
	if r.err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", path, r.err, keepTail(r.combined(), 200))
	}
	v := semverInText.FindString(r.stdout)
	if v == "" {
		return "", fmt.Errorf("%s --version printed no version: %q", path, keepHead(r.stdout, 200))
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
