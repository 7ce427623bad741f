package ttcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/install/installcmd"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/ui"
)

func newPreflightCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "List every blocker an upgrade would meet on each node, changing nothing",
		Long: `Check every selected node for what would stop kubectl tt upgrade kmd|smi|firmware with the same
flags, changing nothing: no cordon, no label, no annotation, nothing on the host. It runs the
same read-only probe helper pod the upgrade runs before its first cordon (and deletes it),
then applies the upgrade's own checks: the tag at the git URL, kernel headers and their
compiler, lockdown or signature enforcement without a signing key, the cards on the PCI bus,
device holders the cordon does not move (ungated DaemonSets, host processes), host-managed
(DKMS) and skipped nodes, the tt-k8s-driver-manager operator, the firmware operator's
TenstorrentFirmwarePolicies and flash Jobs, and what the drain meets: pods covered by a
PodDisruptionBudget that allows no disruption, and bare pods (no controller).

One line per blocker with its fix, then a summary. Exit 0 when nothing blocks, 3 when
something does. -o json prints a PreflightReport (docs/output.md).`,
		Example: `  kubectl tt preflight kmd --version 2.8.0
  kubectl tt preflight firmware --version 19.2.0 --nodes tt-a,tt-b -o json`,
	}
	cmd.AddCommand(preflightOf(g, "kmd", func() (*cobra.Command, func([]string) (tt.Preflight, tt.Selection, cli.RunFlags, error)) {
		c, o := upgradeKMDCommand(g)
		return c, func(args []string) (tt.Preflight, tt.Selection, cli.RunFlags, error) {
			if err := o.Complete(args); err != nil {
				return tt.Preflight{}, tt.Selection{}, o.run, err
			}
			if err := o.Validate(); err != nil {
				return tt.Preflight{}, tt.Selection{}, o.run, err
			}
			return tt.KMDPreflight(o.cfg), o.selection, o.run, nil
		}
	}))
	cmd.AddCommand(preflightOf(g, "smi", func() (*cobra.Command, func([]string) (tt.Preflight, tt.Selection, cli.RunFlags, error)) {
		c, o := upgradeSMICommand(g)
		return c, func(args []string) (tt.Preflight, tt.Selection, cli.RunFlags, error) {
			o.Complete(args)
			return tt.SMIPreflight(o.cfg), o.selection, o.run, o.Validate()
		}
	}))
	cmd.AddCommand(preflightOf(g, "firmware", func() (*cobra.Command, func([]string) (tt.Preflight, tt.Selection, cli.RunFlags, error)) {
		c, o := upgradeFirmwareCommand(g)
		return c, func(args []string) (tt.Preflight, tt.Selection, cli.RunFlags, error) {
			o.Complete(args)
			return tt.FirmwarePreflight(&o.cfg), o.selection, o.run, o.Validate()
		}
	}))
	return cmd
}

// notForPreflight are the upgrade's flags that only pace or record a run.
var notForPreflight = []string{"dry-run", "steal-lock", "lock-namespace", "max-parallel", "max-failures", "max-unavailable-per",
	"halt-on-failure", "canary", "grace-period"}

// preflightOf is `kubectl tt preflight <component>`: the upgrade command's
// own flags and configuration (so both check the same), run read-only.
func preflightOf(g *cli.Globals, component string,
	build func() (*cobra.Command, func([]string) (tt.Preflight, tt.Selection, cli.RunFlags, error))) *cobra.Command {
	cmd, complete := build()
	cmd.Short = "Check the nodes `kubectl tt upgrade " + component + "` would work on, changing nothing"
	cmd.Long = "Check, read-only, every blocker `kubectl tt upgrade " + component + "` with the same flags would meet " +
		"(see kubectl tt preflight --help). Exit 3 when something blocks."
	cmd.Example = "  kubectl tt preflight " + component + " --version " + map[string]string{"kmd": "2.8.0", "smi": "5.2.0",
		"firmware": "19.2.0"}[component]
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		for _, n := range notForPreflight {
			if f.Name == n || strings.HasPrefix(f.Name, "soak") {
				f.Hidden = true
			}
		}
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		p, sel, run, err := complete(args)
		if err != nil {
			return err
		}
		if run.DryRun {
			return cli.UsageErrorf("preflight changes nothing: --dry-run does not apply")
		}
		return runPreflight(cmd.Context(), g, p, sel, run.Output)
	}
	return cmd
}

func runPreflight(ctx context.Context, g *cli.Globals, p tt.Preflight, sel tt.Selection, output string) error {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	dyn, err := g.Factory.DynamicClient()
	if err != nil {
		return err
	}
	if p.ProbeCmd != nil {
		if err := applyAdminParams(ctx, cs, &p.Helper, &sel); err != nil {
			return err
		}
		if err := checkHelperPrerequisites(ctx, cs, p.Helper); err != nil {
			return err
		}
	}
	rep, err := tt.RunPreflight(ctx, cs, dyn, p, sel, "preflight-"+cli.NewRunID())
	var bad *tt.SelectionError
	if errors.As(err, &bad) {
		return cli.UsageErrorf("%v", err)
	}
	var denied *tt.AccessError
	if errors.As(err, &denied) {
		return cli.WithExitCode(cli.ExitBlocked, err)
	}
	if err != nil {
		return err
	}
	skew, err := installcmd.CheckInstalled(ctx, g, installSpec.Plugin)
	if err != nil {
		return err
	}
	if len(skew.Skews) > 0 {
		detail, fix := skew.Summary(installSpec.Plugin)
		rep.Warnings = append(rep.Warnings, tt.Finding{Check: tt.CheckInstall, Message: detail + "; " + fix})
	}
	if output != "" {
		if err := ui.PrintObject(g.IOStreams.Out, output, rep); err != nil {
			return err
		}
	} else {
		printPreflight(g.IOStreams.Out, rep)
	}
	if n := len(rep.Findings); n > 0 {
		return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%d blocker(s) on %d of %d node(s); fix them before upgrading %s",
			n, rep.BlockedNodes(), len(rep.Nodes), p.Component))
	}
	return nil
}

func printPreflight(w io.Writer, rep *tt.PreflightReport) {
	st := ui.NewStyle(w)
	by := map[string][]tt.Finding{}
	for _, f := range rep.Findings {
		by[f.Node] = append(by[f.Node], f)
	}
	line := func(f tt.Finding) { fmt.Fprintf(w, "  %s %s %s\n", st.Bad("✗"), st.Dim("["+f.Check+"]"), f.Message) }
	if fs := by[""]; len(fs) > 0 || len(rep.Warnings) > 0 {
		fmt.Fprintf(w, "%s\n", st.Bold("cluster"))
		for _, f := range fs {
			line(f)
		}
		for _, f := range rep.Warnings {
			fmt.Fprintf(w, "  %s %s %s\n", st.Warn("!"), st.Dim("["+f.Check+"]"), f.Message)
		}
	}
	for _, n := range rep.Nodes {
		fmt.Fprintf(w, "%s\n", st.Bold(n))
		if len(by[n]) == 0 {
			fmt.Fprintf(w, "  %s nothing blocks upgrade %s\n", st.OK("✓"), rep.Component)
		}
		for _, f := range by[n] {
			line(f)
		}
	}
	fmt.Fprintf(w, "\n%d blocker(s); %d of %d node(s) blocked\n", len(rep.Findings), rep.BlockedNodes(), len(rep.Nodes))
}
