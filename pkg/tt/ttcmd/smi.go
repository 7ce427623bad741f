package ttcmd

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/tt"
)

type smiOptions struct {
	g         *cli.Globals
	run       cli.RunFlags
	sel       selectionFlags
	helper    helperFlags
	version   string
	cfg       *tt.SMIConfig
	soak      cli.SoakFlags
	selection tt.Selection
}

func newUpgradeSMICommand(g *cli.Globals) *cobra.Command { cmd, _ := upgradeSMICommand(g); return cmd }

// upgradeSMICommand is the command and its options, which preflight shares.
func upgradeSMICommand(g *cli.Globals) (*cobra.Command, *smiOptions) {
	o := &smiOptions{g: g}
	cmd := &cobra.Command{
		Use:     "smi --version X.Y.Z [NODE...]",
		Short:   "Install tt-smi on every selected node (atomic replace; no cordon needed)",
		Example: `  kubectl tt upgrade smi --version 5.2.0 --helper-image ghcr.io/rollbook/node-agent:0.1.0`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				return err
			}
			return runOrSubmit(cmd, o.g, o.helper.image, o.Run)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.version, "version", "", "tt-smi version the helper image ships, MAJOR.MINOR.PATCH (required)")
	_ = cmd.MarkFlagRequired("version")
	o.sel.add(cmd, g)
	o.sel.addAcknowledge(cmd, g)
	o.helper.add(fs, 5*time.Minute)
	o.run.AddFlags(fs, "kube-system")
	o.soak.AddFlags(fs)
	return cmd, o
}

// Complete turns the flags into the runbook's configuration.
func (o *smiOptions) Complete(args []string) {
	o.cfg = &tt.SMIConfig{Version: o.version, Helper: o.helper.config()}
	o.selection = o.sel.selection(args)
	o.selection.HelperNamespace = o.helper.namespace
}

// Validate rejects bad input before any API call.
func (o *smiOptions) Validate() error {
	return validateUpgrade(o.run, o.soak, o.cfg, o.selection)
}

// Run installs tt-smi on the selected nodes through one session.
func (o *smiOptions) Run(ctx context.Context) error {
	s, ctx, targets, err := start(ctx, o.g, o.run, o.selection, &o.cfg.Helper, tt.DriverTargets, func(node string) []kube.HelperSpec {
		return []kube.HelperSpec{tt.ProbeSpec(o.cfg.Helper, node, ""), tt.SMIHelperSpec(o.cfg, node)}
	}, 1) // one node at a time
	if err != nil {
		return err
	}
	o.cfg.RunID = s.RunID
	opts := runbook.Options{}
	health := tt.RolledNodesHealthy(s.Client, nodeNames(targets), tt.LabelSMIVersion, o.cfg.Version)
	if err := s.ApplySoak(&opts, o.soak, health); err != nil {
		return s.Fail(err)
	}
	res := cli.Run(ctx, s, tt.SMIRunbook(s.Client, s.Recorder, o.cfg), targets, opts)
	return s.Finish(res, "kubectl tt status")
}
