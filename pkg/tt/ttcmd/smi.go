package ttcmd

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/tt"
)

func newUpgradeSMICommand(g *cli.Globals) *cobra.Command {
	var (
		run     cli.RunFlags
		sel     selectionFlags
		helper  helperFlags
		version string
	)
	cmd := &cobra.Command{
		Use:     "smi --version X.Y.Z [NODE...]",
		Short:   "Install tt-smi on every selected node (atomic replace; no cordon needed)",
		Example: `  kubectl tt upgrade smi --version 5.2.0 --helper-image ghcr.io/rollbook/node-agent:0.1.0`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := run.Validate(); err != nil {
				return err
			}
			cfg := &tt.SMIConfig{Version: version, Helper: helper.config()}
			if err := cfg.Validate(); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			selection := sel.selection(args)
			if err := selection.Validate(); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			s, ctx, err := cli.StartSession(cmd.Context(), g, run, "tt", tt.LockName)
			if err != nil {
				return err
			}
			cfg.RunID = s.RunID
			targets, skipped, err := tt.DriverTargets(ctx, s.Client, selection)
			if err != nil {
				_ = s.Abort()
				return err
			}
			for _, sk := range skipped {
				s.Progress.Printf("skip %s: %s", sk.Node, sk.Why)
			}
			res := runbook.Run(ctx, tt.SMIRunbook(s.Client, s.Recorder, cfg), targets,
				runbook.Options{RunID: s.RunID, DryRun: run.DryRun, Reporter: s.Progress})
			return s.Finish(res, "kubectl tt status")
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&version, "version", "", "tt-smi version the helper image ships, MAJOR.MINOR.PATCH (required)")
	_ = cmd.MarkFlagRequired("version")
	sel.add(cmd, g)
	helper.add(fs, 5*time.Minute)
	run.AddFlags(fs, "kube-system")
	return cmd
}
