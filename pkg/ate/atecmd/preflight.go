package atecmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/install/installcmd"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
)

// preflightOptions are the flags of preflight.
type preflightOptions struct {
	g    *cli.Globals
	run  cli.RunFlags
	api  apiFlags
	opts campaign.PreflightOptions
	pin  bool
}

func newPreflightCommand(g *cli.Globals) *cobra.Command {
	o := &preflightOptions{g: g}
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check everything the runbook asks you to confirm before the first node",
		Long: `Check every item of the runbook's "confirm before you begin" list, each with a pass/fail
mark and the fix: uniform node labels, a versioned atelet DaemonSet, every serving pool
pinned to OLD and READY==DESIRED, DrainWorker served and implemented, at least two nodes,
and GKE hazards. Exit 3 when a check fails.

--pin-pools first runs the pin-pools runbook (runbooks/ate-pin-pools.md) in a session that
holds the roll's lock: it pins each unpinned serving pool to OLD, but only while no actor is
on its workers (--dry-run shows the plan). With -o, its result is printed before the checks:
two documents.`,
		Example: `  kubectl ate preflight
  kubectl ate preflight --pin-pools --dry-run
  kubectl ate preflight --pin-pools -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.api.add(cmd.Flags())
	o.run.AddFlags(cmd.Flags(), fleet.Namespace)
	cmd.Flags().BoolVar(&o.opts.AllowFullStop, "allow-full-stop", false, "accept a single-node cluster, where moving the node stops "+
		"everything")
	cmd.Flags().BoolVar(&o.pin, "pin-pools", false, "pin unpinned pools to OLD (only those with no actor on their workers)")
	return cmd
}

// Validate rejects bad flags before any API call.
func (o *preflightOptions) Validate() error { return o.run.Validate() }

// Run pins the pools when asked, then checks.
func (o *preflightOptions) Run(ctx context.Context) error {
	if o.pin {
		if err := o.pinPools(ctx); err != nil {
			return err
		}
	}
	r, err := connectReaders(ctx, o.g, &o.api, false)
	if err != nil {
		return err
	}
	defer r.close()
	checks, err := campaign.ReadPreflight(ctx, r.cs, r.dyn, r.view(ctx), o.opts)
	if err != nil {
		return err
	}
	if c, err := installCheck(ctx, o.g); err != nil {
		return err
	} else if c != nil {
		checks = append(checks, *c)
	}
	failed := campaign.Failed(checks)
	if o.run.Output != "" {
		if err := ui.PrintObject(o.g.IOStreams.Out, o.run.Output, ui.Object{Kind: "PreflightChecks",
			Value: map[string]any{"checks": checks, "failed": failed}}); err != nil {
			return err
		}
	} else {
		printChecks(o.g.IOStreams.Out, checks)
		printGKEBefore(ctx, o.g, o.g.IOStreams.Out)
	}
	if failed > 0 {
		return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%d check(s) failed; fix them before rolling", failed))
	}
	return nil
}

// pinPools runs the pin-pools runbook in its own session; the checks that
// follow read the cluster it leaves.
func (o *preflightOptions) pinPools(ctx context.Context) error {
	return runOne(ctx, o.g, o.run, &o.api, func(ctx context.Context, s *apiSession) (runbook.Result, error) {
		return cli.Run(ctx, s.Session, roll.PinPoolsRunbook(s.Client, s.dyn, s.client, s.Recorder),
			[]runbook.Target{runbook.ScopeTarget{Scope: "pools"}}, runbook.Options{}), nil
	}, "the checks follow", "")
}

func printChecks(w io.Writer, checks []fleet.Check) {
	st := ui.NewStyle(w)
	group := ""
	for _, c := range checks {
		if c.Group != group {
			group = c.Group
			fmt.Fprintf(w, "\n%s\n", st.Bold(group))
		}
		mark := st.OK("✓")
		switch {
		case c.Warning:
			mark = st.Warn("!")
		case !c.OK:
			mark = st.Bad("✗")
		}
		line := fmt.Sprintf("  %s %s", mark, c.Name)
		if c.Detail != "" {
			line += st.Dim(" (" + c.Detail + ")")
		}
		fmt.Fprintln(w, line)
		if (!c.OK || c.Warning) && c.Fix != "" {
			fmt.Fprintf(w, "      → %s\n", c.Fix)
		}
	}
	fmt.Fprintln(w)
}

// installCheck warns when the policies and roles `kubectl ate install`
// applies are missing or from another version; nil when they match.
func installCheck(ctx context.Context, g *cli.Globals) (*fleet.Check, error) {
	skew, err := installcmd.CheckInstalled(ctx, g, installSpec.Plugin)
	if err != nil || len(skew.Skews) == 0 {
		return nil, err
	}
	detail, fix := skew.Summary(installSpec.Plugin)
	return &fleet.Check{Group: "install", Name: "the policies and roles match this plugin", OK: true, Warning: true,
		Detail: detail, Fix: fix}, nil
}
