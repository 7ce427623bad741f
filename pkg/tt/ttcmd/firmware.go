package ttcmd

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/tt"
)

type firmwareOptions struct {
	g           *cli.Globals
	run         cli.RunFlags
	sel         selectionFlags
	helper      helperFlags
	cfg         tt.FirmwareConfig
	gates       []string
	maxParallel int
	halt        bool
	soak        cli.SoakFlags
	drainFlags  drainFlags
	selection   tt.Selection
}

func newUpgradeFirmwareCommand(g *cli.Globals) *cobra.Command {
	cmd, _ := upgradeFirmwareCommand(g)
	return cmd
}

// upgradeFirmwareCommand is the command and its options, which preflight shares.
func upgradeFirmwareCommand(g *cli.Globals) (*cobra.Command, *firmwareOptions) {
	o := &firmwareOptions{g: g}
	cmd := &cobra.Command{
		Use:   "firmware --version X.Y.Z [NODE...]",
		Short: "Flash every selected node to a firmware bundle, at most --max-parallel nodes out of service at once",
		Long: `Flash every selected Tenstorrent node to firmware bundle --version.

Per node: Pending → Cordoning → Draining → Flashing → Uncordoning → Done (or Failed).
--max-parallel bounds the nodes out of service (cordoned until uncordoned), not just running
flashes. A node counts as done from its measured readback recorded on the node, so an
interrupted run resumes without re-flashing finished nodes. Nodes labelled
firmware.tenstorrent.com/skip=true are skipped.`,
		Example: `  kubectl tt upgrade firmware --version 19.9.0 --dry-run
  kubectl tt upgrade firmware --version 19.9.0 --max-parallel 2
  # Pin the bundle's bytes (sha256sum fw_pack-19.9.0.fwbundle)
  kubectl tt upgrade firmware --version 19.9.0 --bundle-sha256 <64 hex digits>
  # Recover a corrupted flash: re-flash nodes already at 19.9.0
  kubectl tt upgrade firmware --version 19.9.0 --force-write --nodes tt-node-7`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				return err
			}
			return runOrSubmit(cmd, o.g, o.helper.image, o.Run)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.cfg.Version, "version", "", "firmware bundle version, MAJOR.MINOR.PATCH (required)")
	fs.StringVar(&o.cfg.BundleURL, "bundle-url", "", "bundle to flash (default: the public tt-system-firmware release of --version)")
	fs.StringVar(&o.cfg.BundleSHA256, "bundle-sha256", "",
		"SHA-256 of the bundle (sha256sum's hex); each node's helper refuses to flash a bundle that differs")
	fs.StringVar(&o.cfg.Readback, "readback-version", "", "what every device must report afterwards (default: --version + \".0\")")
	fs.IntVar(&o.maxParallel, "max-parallel", 1, "nodes out of service at once")
	addPerLabelFlag(fs, &o.cfg.MaxUnavailablePer)
	fs.DurationVar(&o.cfg.FlashTimeout, "flash-timeout", 15*time.Minute, "deadline of one node's flash, kept across re-runs")
	fs.BoolVar(&o.cfg.Drain, "drain", true, "evict pods that hold /dev/tenstorrent before flashing")
	fs.DurationVar(&o.cfg.DrainTimeout, "drain-timeout", 10*time.Minute, "how long the drain may take, kept across re-runs")
	fs.BoolVar(&o.halt, "halt-on-failure", true, "start no new node once one has failed (nodes in progress finish their step)")
	fs.BoolVar(&o.cfg.ForceWrite, "force-write", false,
		"re-flash nodes already at the readback version (recovery), and let tt-flash run with --force where it "+
			"refuses without it (an upgrade across more than one major, a chip with no running version); resumable")
	fs.BoolVar(&o.cfg.AllowMajorDowngrade, "allow-major-downgrade", false,
		"flash a bundle of an older major version than a chip runs (tt-flash --allow-major-downgrades); without it the probe "+
			"refuses such a node before its cordon")
	fs.BoolVar(&o.cfg.ForceUnload, "force-unload", false,
		"kill processes still holding the device before flashing (their in-flight work is lost)")
	fs.BoolVar(&o.cfg.Force, "force", false, "also evict bare pods that hold the device, as kubectl drain --force; they are not recreated")
	o.drainFlags.add(fs)
	fs.BoolVar(&o.cfg.ContinueOnReadbackFailure, "continue-on-readback-failure", false,
		"flash even when the pre-flash readback fails after one reset")
	fs.StringSliceVar(&o.gates, "deploy-gate", []string{tt.DefaultDeployGate},
		"node labels set to \"false\" during the flash so DaemonSets holding the device leave (empty to disable)")
	_ = cmd.MarkFlagRequired("version")
	o.sel.add(cmd, g)
	o.sel.addAcknowledge(cmd, g)
	o.helper.add(fs, 15*time.Minute)
	_ = fs.MarkHidden("helper-timeout") // the flash timeout is the helper's deadline
	o.run.AddFlags(fs, "kube-system")
	o.soak.AddFlags(fs)
	return cmd, o
}

// Complete fills the configuration from the flags and their defaults.
func (o *firmwareOptions) Complete(args []string) {
	o.cfg.DeployGates = gateList(o.gates)
	o.cfg.Helper = o.helper.config()
	o.cfg.MaxParallel = o.maxParallel
	o.cfg.DeleteEmptyDirData, o.cfg.GracePeriod = o.drainFlags.deleteEmptyDirData, o.drainFlags.gracePeriodSeconds()
	o.cfg.Complete()
	o.selection = o.sel.selection(args)
	o.selection.HelperNamespace = o.helper.namespace
	o.cfg.Acknowledged = o.selection.AcknowledgedFailedFlash
	o.selection.BudgetLabels = slices.Sorted(maps.Keys(o.cfg.MaxUnavailablePer))
}

// Validate rejects bad input before any API call.
func (o *firmwareOptions) Validate() error {
	if o.maxParallel < 1 {
		return cli.UsageErrorf("--max-parallel must be at least 1, not %d", o.maxParallel)
	}
	return validateUpgrade(o.run, o.soak, &o.cfg, o.selection)
}

// Run flashes the selected nodes through one session.
func (o *firmwareOptions) Run(ctx context.Context) error {
	s, ctx, targets, err := start(ctx, o.g, o.run, o.selection, &o.cfg.Helper, tt.FirmwareTargets, func(node string) []kube.HelperSpec {
		return []kube.HelperSpec{tt.FirmwareProbeSpec(&o.cfg, node), tt.FirmwareHelperSpec(&o.cfg, node)}
	}, o.cfg.MaxParallel)
	if err != nil {
		return err
	}
	cfg := &o.cfg
	cfg.RunID = s.RunID
	if cfg.Operators, err = readOperatorClaims(ctx, o.g, s.Client, o.selection); err != nil {
		return s.Fail(err)
	}
	if !s.DryRun() {
		// Held only while this run's helpers may start: they read it then.
		removeSecret, err := cfg.StoreBundleSecret(ctx, s.Client)
		if err != nil {
			return s.Fail(err)
		}
		defer func() {
			if err := removeSecret(context.WithoutCancel(ctx)); err != nil {
				s.Progress.Printf("could not delete the bundle URL's Secret (kubectl tt cleanup removes it): %v", err)
			}
		}()
	}
	var lease tt.Annotated
	if l := s.Lock(); l != nil {
		lease = l
	}
	if cfg.ForceWrite {
		var resumed bool
		if cfg.ForceSince, resumed, err = tt.ForceCampaign(ctx, lease, cfg.Readback, targets); err != nil {
			return s.Fail(err)
		}
		if resumed {
			s.Progress.Printf("resuming the interrupted forced re-flash to %s started %s", cfg.Readback,
				cfg.ForceSince.Format(time.RFC3339))
		}
	}
	// The next batch probes while this one flashes; the cordon's budget
	// guard (an Exclusive step) keeps --max-parallel nodes out at most.
	opts := runbook.Options{Parallel: o.maxParallel, Prefetch: o.maxParallel, KeepGoing: !o.halt}
	if err := s.ApplySoak(&opts, o.soak, tt.RolledNodesHealthy(s.Client, nodeNames(targets), tt.LabelFirmware, cfg.Readback)); err != nil {
		return s.Fail(err)
	}
	res := cli.Run(ctx, s, tt.FirmwareRunbook(s.Client, s.Recorder, cfg), targets, opts)
	if cfg.ForceWrite {
		if err := tt.EndForceCampaign(ctx, lease, res); err != nil {
			s.Progress.Printf("could not end the forced campaign on the lease: %v", err)
		}
	}
	next := "kubectl tt status"
	if res.Outcome != runbook.OutcomeDone && res.Outcome != runbook.OutcomePlanned {
		next = fmt.Sprintf("fix what is shown above, then re-run: kubectl tt upgrade firmware --version %s", cfg.Version)
		if nodes := tt.NeedPerson(ctx, s.Client, res, cfg.RunID); len(nodes) > 0 {
			next = tt.NeedPersonNext(nodes, cfg.Version)
		}
	}
	return s.Finish(res, next)
}
