package atecmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/ui"
)

func newPreflightCommand(g *cli.Globals) *cobra.Command {
	var (
		api    apiFlags
		opts   ate.PreflightOptions
		pin    bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check everything the runbook asks you to confirm before the first node",
		Long: `Check every item of the runbook's "confirm before you begin" list, each with a pass/fail
mark and the fix: uniform node labels, a versioned atelet DaemonSet, every serving pool
pinned to OLD and READY==DESIRED, DrainWorker served and implemented, at least two nodes,
and GKE hazards. --pin-pools pins an unpinned pool, but only while no actor is on its workers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ui.ValidateOutput(output, "json", "yaml"); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			ctx := cmd.Context()
			cs, err := g.Factory.KubernetesClientSet()
			if err != nil {
				return err
			}
			dyn, err := dynamicClient(g)
			if err != nil {
				return err
			}
			c, err := ate.ObserveCluster(ctx, cs, dyn)
			if err != nil {
				return err
			}
			if opts.Deployments, err = ate.Deployments(ctx, cs); err != nil {
				return err
			}
			var caps *ateapi.Capabilities
			var inv *ateapi.Inventory
			client, apiErr := api.dial(ctx, g)
			if apiErr == nil {
				defer client.Close()
				cp := client.Capabilities()
				caps = &cp
				inv, apiErr = client.Inventory(ctx)
			}
			if pin {
				if apiErr != nil {
					return fmt.Errorf("--pin-pools needs the control API to prove no actor is on a pool's workers: %w", apiErr)
				}
				rec := kube.Recorders{ui.NewProgress(g.IOStreams.ErrOut),
					&kube.EventWriter{Client: cs, Component: "kubectl-ate", Instance: cli.NewRunID()}}
				for _, p := range c.ServingPools() {
					if p.Pin == "" {
						if err := ate.PinPool(ctx, dyn, rec, p, c.Old, inv); err != nil {
							return cli.WithExitCode(cli.ExitBlocked, err)
						}
					}
				}
				if c, err = ate.ObserveCluster(ctx, cs, dyn); err != nil {
					return err
				}
			}
			checks := ate.Preflight(ctx, cs, c, caps, apiErr, opts)
			if output != "" {
				if err := ui.PrintObject(g.IOStreams.Out, output, map[string]any{"checks": checks,
					"failed": ate.Failed(checks)}); err != nil {
					return err
				}
			} else {
				printChecks(g.IOStreams.Out, checks)
				printGKEBefore(ctx, g, g.IOStreams.Out, c)
			}
			if n := ate.Failed(checks); n > 0 {
				return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%d check(s) failed; fix them before rolling", n))
			}
			return nil
		},
	}
	api.add(cmd.Flags())
	cmd.Flags().BoolVar(&opts.AllowFullStop, "allow-full-stop", false, "accept a single-node cluster, where moving the node stops "+
		"everything")
	cmd.Flags().BoolVar(&pin, "pin-pools", false, "pin unpinned pools to OLD (only those with no actor on their workers)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json|yaml")
	return cmd
}

func printChecks(w io.Writer, checks []ate.Check) {
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
