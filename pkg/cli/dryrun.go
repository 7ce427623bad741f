package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// DryRunVar registers --dry-run on a command that does not run a runbook,
// spelled as kubectl spells it: bare or =true is mode, =mode too, =none
// and =false are off. mode is "client" (the command says what it would do)
// or "server" (the API server checks and keeps nothing). Any other value
// is a usage error naming the spellings, not a strconv error.
func DryRunVar(fs *pflag.FlagSet, p *bool, mode, usage string) {
	fs.Var(&dryRunFlag{p: p, mode: mode}, "dry-run", usage)
	fs.Lookup("dry-run").NoOptDefVal = mode
}

type dryRunFlag struct {
	p    *bool
	mode string
}

func (d *dryRunFlag) String() string {
	if d.p != nil && *d.p {
		return d.mode
	}
	return "none"
}

func (d *dryRunFlag) Set(v string) error {
	switch strings.ToLower(v) {
	case "", "true", d.mode:
		*d.p = true
	case "false", "none":
		*d.p = false
	default:
		return fmt.Errorf("--dry-run=%s: this command takes --dry-run (the same as --dry-run=%s) or --dry-run=none", v, d.mode)
	}
	return nil
}

func (d *dryRunFlag) Type() string { return "" }
