package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli/lease"
)

// PauseOptions are the flags of `pause` and `resume`.
type PauseOptions struct {
	g             *Globals
	plugin        string
	lockName      string
	LockNamespace string
	Reason        string
	dry           RunFlags // only its --dry-run, spelled as the runs spell it
	resume        bool
}

// NewPauseCommands returns `pause` and `resume` for a plugin whose runs hold
// the Lease lockName (default namespace defaultNS).
func NewPauseCommands(g *Globals, plugin, lockName, defaultNS string) []*cobra.Command {
	mk := func(resume bool) *cobra.Command {
		o := &PauseOptions{g: g, plugin: plugin, lockName: lockName, resume: resume}
		cmd := &cobra.Command{
			Use:   "pause",
			Short: "Pause the roll: the running one finishes the node in flight and starts no other",
			Long: fmt.Sprintf(`Pause the roll, like the operator's spec.paused. A running roll finishes the node it
is working on, starts no new one and exits 0 with "paused"; a new run starts nothing until
"kubectl %[1]s resume". "kubectl %[1]s status" shows who paused it and when.`, plugin),
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
		}
		if resume {
			cmd.Use, cmd.Short = "resume", "Lift a pause; then re-run the roll's command to continue"
			cmd.Long = fmt.Sprintf("Lift the pause set by \"kubectl %s pause\". "+
				"Nothing starts by itself: re-run the roll's command.", plugin)
		} else {
			cmd.Flags().StringVar(&o.Reason, "reason", "", "why the roll is paused (shown by status)")
		}
		cmd.Flags().StringVar(&o.LockNamespace, "lock-namespace", defaultNS, "namespace of the roll's Lease")
		cmd.Flags().Var(dryRunValue{&o.dry}, "dry-run", "say what would change on the roll's Lease and change nothing")
		cmd.Flags().Lookup("dry-run").NoOptDefVal = "client"
		return cmd
	}
	return []*cobra.Command{mk(false), mk(true)}
}

// Run sets or lifts the pause.
func (o *PauseOptions) Run(ctx context.Context) error {
	if o.dry.badDryRun != "" {
		return UsageErrorf("--dry-run=%s: only client (the default) or none", o.dry.badDryRun)
	}
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	out := o.g.IOStreams.Out
	fmt.Fprintln(out, Where(o.g))
	if o.dry.DryRun {
		return o.dryRun(ctx, cs)
	}
	if o.resume {
		if err := lease.SetPause(ctx, cs, o.LockNamespace, o.lockName, nil); err != nil {
			return err
		}
		fmt.Fprintf(out, "resumed; re-run the roll's command to continue (kubectl %s status shows where it stands)\n", o.plugin)
		return nil
	}
	p := &lease.Pause{By: lease.WhoAmI(ctx, cs), At: time.Now().UTC(), Reason: o.Reason}
	if err := lease.SetPause(ctx, cs, o.LockNamespace, o.lockName, p); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s\nA running roll finishes the node in flight and starts no other; `kubectl %s resume` lifts the pause.\n",
		p, o.plugin)
	return nil
}

// dryRun says what pause or resume would do to the Lease, from what it
// holds now, and writes nothing.
func (o *PauseOptions) dryRun(ctx context.Context, cs kubernetes.Interface) error {
	out := o.g.IOStreams.Out
	cur, err := lease.ReadPause(ctx, cs, o.LockNamespace, o.lockName)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("Lease %s/%s", o.LockNamespace, o.lockName)
	switch {
	case o.resume && cur == nil:
		fmt.Fprintf(out, "(dry run) the roll is not paused; resume would change nothing on %s\n", where)
	case o.resume:
		fmt.Fprintf(out, "(dry run) would lift the pause on %s: %s\n", where, cur)
	default:
		p := &lease.Pause{By: lease.WhoAmI(ctx, cs), At: time.Now().UTC(), Reason: o.Reason}
		if cur != nil {
			fmt.Fprintf(out, "(dry run) already paused (%s); would replace it on %s with: %s\n", cur, where, p)
		} else {
			fmt.Fprintf(out, "(dry run) would pause the roll on %s: %s\n", where, p)
		}
	}
	return nil
}

// PauseNote is the line status prints when plugin's roll is paused, or "".
func PauseNote(ctx context.Context, cs kubernetes.Interface, plugin, lockNamespace, lockName string) string {
	p, err := lease.ReadPause(ctx, cs, lockNamespace, lockName)
	if err != nil || p == nil {
		return ""
	}
	return fmt.Sprintf("PAUSED: %s — `kubectl %s resume` lifts it", p, plugin)
}
