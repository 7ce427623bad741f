package cli

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/rollbook/rollbook/pkg/ui"
)

// RunFlags are the flags of every mutating command.
type RunFlags struct {
	DryRun        bool
	Output        string
	StealLock     bool
	LockNamespace string
	badDryRun     string
}

// dryRunValue is --dry-run, also spelled as kubectl does: --dry-run=client
// (the same as --dry-run) and --dry-run=none (off). rollbook plans on the
// client; --dry-run=server is refused rather than silently downgraded.
type dryRunValue struct{ f *RunFlags }

func (d dryRunValue) String() string {
	if d.f != nil && d.f.DryRun {
		return "client"
	}
	return "none"
}

func (d dryRunValue) Set(v string) error {
	switch strings.ToLower(v) {
	case "", "true", "client":
		d.f.DryRun = true
	case "false", "none":
		d.f.DryRun = false
	default:
		d.f.badDryRun = v
	}
	return nil
}

func (d dryRunValue) Type() string { return "" }

// AddFlags registers --dry-run, -o, --steal-lock and --lock-namespace.
func (f *RunFlags) AddFlags(fs *pflag.FlagSet, defaultLockNamespace string) {
	fs.Var(dryRunValue{f}, "dry-run", "print the plan — every step and every object it would change — and change nothing "+
		"(also --dry-run=client; --dry-run=none is off)")
	fs.Lookup("dry-run").NoOptDefVal = "client"
	fs.StringVarP(&f.Output, "output", "o", "", "output format of the result (progress then goes to stderr): "+
		outputHelp([]string{"json", "yaml", "name", "jsonpath"}))
	fs.BoolVar(&f.StealLock, "steal-lock", false, "take over the lock even from a run that still renews it "+
		"(a live but stuck run; it stops acting at its next renewal). A dead holder is taken over without this flag")
	fs.StringVar(&f.LockNamespace, "lock-namespace", defaultLockNamespace, "namespace of the Lease that keeps two runs from fighting")
}

// Validate rejects bad values before any API call.
func (f *RunFlags) Validate() error {
	if f.badDryRun != "" {
		return UsageErrorf("--dry-run=%s: rollbook plans on the client; use --dry-run (or --dry-run=client)", f.badDryRun)
	}
	if err := ui.ValidateOutput(f.Output, "json", "yaml", "name", "jsonpath"); err != nil {
		return UsageErrorf("%v", err)
	}
	return nil
}
