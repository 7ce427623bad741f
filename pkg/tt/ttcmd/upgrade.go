package ttcmd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/tt"
)

func newUpgradeCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade tt-kmd, tt-smi or firmware node by node",
	}
	cmd.AddCommand(newUpgradeKMDCommand(g), newUpgradeSMICommand(g), newUpgradeFirmwareCommand(g))
	for _, c := range cmd.Commands() {
		addInClusterFlags(c)
		c.Flags().BoolP("yes", "y", false, "upgrade every node without asking (with no NODE, --nodes or --selector a terminal is "+
			"asked first; a script is not)")
	}
	return cmd
}

type kmdOptions struct {
	g           *cli.Globals
	run         cli.RunFlags
	sel         selectionFlags
	helper      helperFlags
	version     string
	commit      string
	gitURL      string
	gates       []string
	drain       bool
	fullNode    bool
	podSelector string
	drainTO     time.Duration
	forceUnload bool
	force       bool
	drainFlags  drainFlags
	soak        cli.SoakFlags
	maxParallel int
	perLabel    map[string]int
	maxFailures int
	signing     tt.SigningConfig

	cfg       *tt.KMDConfig
	selection tt.Selection
}

func newUpgradeKMDCommand(g *cli.Globals) *cobra.Command { cmd, _ := upgradeKMDCommand(g); return cmd }

// upgradeKMDCommand is the command and its options, which preflight shares.
func upgradeKMDCommand(g *cli.Globals) (*cobra.Command, *kmdOptions) {
	o := &kmdOptions{g: g}
	cmd := &cobra.Command{
		Use:   "kmd --version X.Y.Z [NODE...]",
		Short: "Upgrade (or downgrade) the Tenstorrent kernel module on every selected node, --max-parallel at a time",
		Long: `Upgrade (or downgrade) tt-kmd on every selected Tenstorrent node, one node at a time by default
(as the operator's DaemonSet rollout), or --max-parallel nodes out of service at once.

Per node: cordon; set the deploy-gate labels to "false" so sibling DaemonSets holding
/dev/tenstorrent leave; evict the pods that hold the device and, with --full-node, drain
the rest — waiting until they are gone; run a helper pod that swaps the module; label the
node with the version the helper measured; restore the gates; uncordon.

Nodes labelled driver.tenstorrent.com/skip=true and host-managed (DKMS) nodes are skipped.
--max-parallel counts nodes from cordon to uncordon, and --max-unavailable-per LABEL=N bounds
them per rack or zone; after --max-failures failed nodes no other starts (those in progress
finish). Raise --max-parallel only when the fleet's spare capacity allows that many nodes
drained at once: the default of 1 is the operator's, which never drains two nodes together.
Re-run the same command to continue after an interruption or a fixed failure.`,
		Example: `  # See what would happen, then do it
  kubectl tt upgrade kmd --version 2.8.0 --dry-run
  kubectl tt upgrade kmd --version 2.8.0

  # Only two nodes; kill processes still holding the device
  kubectl tt upgrade kmd --version 2.8.0 --nodes tt-a,tt-b --force-unload

  # Ten nodes at a time, at most one per rack; stop starting nodes after 3 failures
  kubectl tt upgrade kmd --version 2.8.0 --max-parallel 10 --max-unavailable-per example.com/rack=1 --max-failures 3

  # Build only the reviewed commit of the tag (git ls-remote <repo> ttkmd-2.8.0)
  kubectl tt upgrade kmd --version 2.8.0 --kmd-commit <40 hex digits>`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return runOrSubmit(cmd, o.g, o.helper.image, o.Run)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.version, "version", "", "tt-kmd version to install, MAJOR.MINOR.PATCH, or MAJOR.MINOR as tt-kmd tagged "+
		"releases before 2.0 (ttkmd-1.34) (required)")
	fs.StringVar(&o.commit, "kmd-commit", "",
		"full commit ID the tag ttkmd-<version> must resolve to; each node's helper refuses to build a tag that moved")
	fs.StringVar(&o.gitURL, "git-url", "", "tt-kmd repository the helpers clone the tag ttkmd-<version> from: https, or file:// "+
		"for a mirror every node has at that path (default: upstream "+nodeagent.DefaultKMDGitURL+")")
	fs.StringSliceVar(&o.gates, "deploy-gate", []string{tt.DefaultDeployGate},
		"node labels set to \"false\" while a node is upgraded, so DaemonSets gated on them leave (empty to disable)")
	fs.BoolVar(&o.drain, "drain", true, "evict pods that hold /dev/tenstorrent before swapping the module")
	fs.BoolVar(&o.fullNode, "full-node", true, "also drain every other pod on the node (DaemonSet pods stay)")
	fs.StringVar(&o.podSelector, "pod-selector", "", "with --full-node, only drain pods matching this label selector")
	fs.DurationVar(&o.drainTO, "drain-timeout", 10*time.Minute, "how long each drain pass may take, kept across re-runs")
	fs.BoolVar(&o.forceUnload, "force-unload", false,
		"kill processes still holding the device before unloading (their in-flight work is lost)")
	fs.BoolVar(&o.force, "force", false,
		"also evict pods no controller manages (bare pods), as kubectl drain --force; they are not recreated")
	o.drainFlags.add(fs)
	fs.IntVar(&o.maxParallel, "max-parallel", 1, "nodes out of service at once, counted from cordon to uncordon "+
		"(1, the operator's, drains one node at a time)")
	addPerLabelFlag(fs, &o.perLabel)
	fs.IntVar(&o.maxFailures, "max-failures", 1, "after this many nodes failed (or blocked) start no other node; "+
		"nodes in progress finish")
	fs.StringVar(&o.signing.KeyFile, "signing-key", "", "sign each module kubectl tt vouches for with this PEM private key, a "+
		"file on this machine (it never enters the cluster), for nodes that load only signed modules (Secure Boot lockdown, "+
		"module.sig_enforce); with --signing-cert")
	fs.StringVar(&o.signing.CertFile, "signing-cert", "", "the certificate of --signing-key, DER or PEM: the one enrolled as a "+
		"MOK on the nodes; the nodes get only this")
	for _, old := range []struct {
		name string
		dst  *string
	}{{"signing-secret", &o.signing.LegacySecret}, {"signing-key-host-path", &o.signing.LegacyKeyHostPath},
		{"signing-cert-host-path", &o.signing.LegacyCertHostPath}} {
		fs.StringVar(old.dst, old.name, "", "removed: use --signing-key and --signing-cert")
		_ = fs.MarkHidden(old.name)
	}
	_ = cmd.MarkFlagRequired("version")
	o.sel.add(cmd, g)
	o.sel.addAcknowledge(cmd, g)
	o.helper.add(fs, 15*time.Minute)
	o.run.AddFlags(fs, "kube-system")
	o.soak.AddFlags(fs)
	return cmd, o
}

// Complete turns the flags into the runbook's configuration.
func (o *kmdOptions) Complete(args []string) error {
	o.cfg = &tt.KMDConfig{Version: o.version, Commit: o.commit, GitURL: o.gitURL, Drain: o.drain, FullNode: o.fullNode,
		DrainTimeout: o.drainTO, ForceUnload: o.forceUnload, Force: o.force, Helper: o.helper.config(), MaxParallel: o.maxParallel,
		MaxUnavailablePer: o.perLabel, Signing: o.signing, DeleteEmptyDirData: o.drainFlags.deleteEmptyDirData,
		GracePeriod: o.drainFlags.gracePeriodSeconds()}
	o.cfg.DeployGates = gateList(o.gates)
	if o.podSelector != "" {
		sel, err := labels.Parse(o.podSelector)
		if err != nil {
			return cli.UsageErrorf("--pod-selector %q: %v", o.podSelector, err)
		}
		o.cfg.PodSelector = sel
	}
	o.selection = o.sel.selection(args)
	o.selection.HelperNamespace = o.helper.namespace
	o.selection.BudgetLabels = slices.Sorted(maps.Keys(o.perLabel))
	return nil
}

// Validate rejects bad input before any API call.
func (o *kmdOptions) Validate() error {
	if o.maxParallel < 1 {
		return cli.UsageErrorf("--max-parallel must be at least 1, not %d", o.maxParallel)
	}
	if o.maxFailures < 1 {
		return cli.UsageErrorf("--max-failures must be at least 1, not %d", o.maxFailures)
	}
	if err := validateUpgrade(o.run, o.soak, o.cfg, o.selection); err != nil {
		return err
	}
	// Before any API call: a key that cannot sign changes nothing.
	if err := o.cfg.Signing.Load(); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	return nil
}

// Run upgrades the selected nodes through one session.
func (o *kmdOptions) Run(ctx context.Context) error {
	cfg := o.cfg
	s, ctx, targets, err := start(ctx, o.g, o.run, o.selection, &cfg.Helper, tt.DriverTargets, func(node string) []kube.HelperSpec {
		return tt.KMDHelperShapes(cfg, node)
	}, cfg.MaxParallel)
	if err != nil {
		return err
	}
	cfg.RunID = s.RunID
	// The next batch probes while this one works; the cordon's budget
	// guards (an Exclusive step) keep --max-parallel nodes out at most.
	// (At 1, nodes go strictly one after another, as they always have.)
	opts := runbook.Options{Parallel: o.maxParallel, MaxFailures: o.maxFailures}
	if o.maxParallel > 1 {
		opts.Prefetch = o.maxParallel
	}
	if s.DryRun() { // the plan in the roll's order: the first node of each kernel group is its builder
		opts.Parallel, opts.Prefetch = 1, 0
	}
	if !s.DryRun() { // a plan keeps each kernel group's builder to the end: the plan names one per kernel
		opts.Reporter = targetEnded{s.Progress, func(r runbook.TargetResult) { cfg.TargetEnded(r.Ref.Name) }}
	}
	if err := s.ApplySoak(&opts, o.soak, tt.RolledNodesHealthy(s.Client, nodeNames(targets), tt.LabelKMDVersion, cfg.Version)); err != nil {
		return s.Fail(err)
	}
	res := cli.Run(ctx, s, tt.KMDRunbook(s.Client, s.Recorder, cfg), targets, opts)
	next := "kubectl tt status"
	if res.Outcome != runbook.OutcomeDone && res.Outcome != runbook.OutcomePlanned {
		next = fmt.Sprintf("fix what is shown above, then re-run: kubectl tt upgrade kmd --version %s", cfg.Version)
	} else if o.run.DryRun {
		next = fmt.Sprintf("kubectl tt upgrade kmd --version %s", cfg.Version)
	}
	return s.Finish(res, next)
}

// start reads the admin's helper policy, finds the target nodes, proves
// the helpers it will create are admitted (and that the helper
// namespace's quotas have room for parallel of them), then starts the session and
// says which nodes it skips. All of it comes before the lock, so a typo in
// a node name is bad input (exit 2), and a node or helper the admin does
// not allow is blocked (exit 3), that changes nothing. helpers are the
// helper pods the runbook creates on a node.
func start(ctx context.Context, g *cli.Globals, run cli.RunFlags, sel tt.Selection, helper *tt.HelperConfig,
	targetsOf func(context.Context, kubernetes.Interface, tt.Selection) ([]runbook.Target, []tt.Skipped, error),
	helpers func(node string) []kube.HelperSpec, parallel int,
) (*cli.Session, context.Context, []runbook.Target, error) {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return nil, ctx, nil, err
	}
	if err := applyAdminParams(ctx, cs, helper, &sel); err != nil {
		return nil, ctx, nil, err
	}
	targets, skipped, err := targetsOf(ctx, cs, sel)
	var bad *tt.SelectionError
	if errors.As(err, &bad) {
		return nil, ctx, nil, cli.UsageErrorf("%v", err)
	}
	var operator *tt.OperatorError
	var denied *tt.AccessError
	var person *tt.NeedsPersonError
	var budget *tt.BudgetLabelError
	if errors.As(err, &operator) || errors.As(err, &denied) || errors.As(err, &budget) ||
		errors.As(err, &person) { // blocked, nothing changed
		return nil, ctx, nil, cli.WithExitCode(cli.ExitBlocked, err)
	}
	if err != nil {
		return nil, ctx, nil, err
	}
	if !run.DryRun {
		if err := cli.CheckPermissions(ctx, cs, "tt", ttPermissions(run.LockNamespace, helper.Namespace)); err != nil {
			return nil, ctx, nil, err
		}
	}
	if err := checkHelperPrerequisites(ctx, cs, *helper); err != nil {
		return nil, ctx, nil, err
	}
	if len(targets) > 0 {
		if err := checkHelpersAdmitted(ctx, cs, helpers(targets[0].Ref().Name)); err != nil {
			return nil, ctx, nil, err
		}
		if err := checkQuotaRoom(ctx, cs, helper.Namespace, helpers(targets[0].Ref().Name), min(parallel, len(targets))); err != nil {
			return nil, ctx, nil, err
		}
	}
	s, ctx, err := cli.StartSession(ctx, g, run, "tt", tt.LockName)
	if err != nil {
		return nil, ctx, nil, err
	}
	for _, sk := range skipped {
		s.Progress.Printf("skip %s: %s", sk.Node, sk.Why)
	}
	return s, ctx, targets, nil
}

// ttPermissions is what an upgrade needs, checked all at once before it
// changes anything (deploy/rbac/tt-operator.yaml grants these, and list on
// resourcequotas, which a run reads only when it may: checkQuotaRoom).
func ttPermissions(lockNS, helperNS string) []cli.Permission {
	return []cli.Permission{
		{Verb: "get", Resource: "nodes"}, {Verb: "list", Resource: "nodes"}, {Verb: "watch", Resource: "nodes"},
		{Verb: "patch", Resource: "nodes"},
		{Verb: "list", Resource: "pods"}, {Verb: "watch", Resource: "pods"}, {Verb: "delete", Resource: "pods"},
		{Verb: "create", Resource: "pods", Subresource: "eviction"},
		{Verb: "list", Group: "policy", Resource: "poddisruptionbudgets"},
		{Verb: "list", Group: "batch", Resource: "jobs"},
		{Verb: "list", Group: tt.FirmwarePolicyResource.Group, Resource: tt.FirmwarePolicyResource.Resource},
		{Verb: "create", Resource: "events"},
		{Verb: "create", Resource: "pods", Namespace: helperNS}, {Verb: "get", Resource: "pods", Namespace: helperNS},
		{Verb: "get", Resource: "pods", Subresource: "log", Namespace: helperNS},
		{Verb: "create", Group: "policy", Resource: "poddisruptionbudgets", Namespace: helperNS},
		{Verb: "get", Resource: "configmaps", Namespace: helperNS}, {Verb: "create", Resource: "configmaps", Namespace: helperNS},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: lockNS, Name: tt.LockName},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: lockNS},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: lockNS, Name: tt.LockName},
		{Verb: "get", Resource: "configmaps", Namespace: lockNS, Name: journal.Name("tt")},
		{Verb: "create", Resource: "configmaps", Namespace: lockNS},
		{Verb: "update", Resource: "configmaps", Namespace: lockNS, Name: journal.Name("tt")},
	}
}

// validateUpgrade is what every upgrade command checks before any API call:
// its run and soak flags, the runbook's configuration and the node selection.
func validateUpgrade(run cli.RunFlags, soak cli.SoakFlags, cfg interface{ Validate() error }, sel tt.Selection) error {
	if err := run.Validate(); err != nil {
		return err
	}
	if err := soak.Validate(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	if err := sel.Validate(); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	return nil
}

// nodeNames are the nodes of node targets.
func nodeNames(targets []runbook.Target) []string {
	names := make([]string, 0, len(targets))
	for _, t := range targets {
		names = append(names, t.Ref().Name)
	}
	return names
}

// gateList drops empty entries (--deploy-gate "" disables the gates).
func gateList(gates []string) []string {
	var out []string
	for _, g := range gates {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}

// targetEnded is a Reporter that also tells the runbook a target ended.
type targetEnded struct {
	runbook.Reporter
	ended func(runbook.TargetResult)
}

func (t targetEnded) TargetDone(r runbook.TargetResult) {
	t.ended(r)
	t.Reporter.TargetDone(r)
}

// readOperatorClaims reads the firmware operator's claims on the selected
// nodes (its policies and unfinished flash Jobs).
func readOperatorClaims(ctx context.Context, g *cli.Globals, cs kubernetes.Interface, sel tt.Selection) (tt.OperatorClaims, error) {
	dyn, err := g.Factory.DynamicClient()
	if err != nil {
		return nil, err
	}
	nodes, err := tt.ListNodes(ctx, cs, sel)
	if err != nil {
		return nil, err
	}
	return tt.ReadFirmwareOperatorClaims(ctx, cs, dyn, nodes)
}

// drainFlags are kubectl drain's flags for the pods a drain evicts.
type drainFlags struct {
	deleteEmptyDirData bool
	gracePeriod        int
}

func (d *drainFlags) add(fs *pflag.FlagSet) {
	fs.BoolVar(&d.deleteEmptyDirData, "delete-emptydir-data", false,
		"also evict pods with emptyDir volumes, as kubectl drain --delete-emptydir-data: their data is deleted; without it "+
			"such a pod refuses the node before its cordon")
	fs.IntVar(&d.gracePeriod, "grace-period", -1,
		"seconds each evicted pod has to stop, as kubectl drain --grace-period; negative: the pod's own "+
			"terminationGracePeriodSeconds")
}

// gracePeriodSeconds is the eviction's grace period, nil for the pod's own.
func (d *drainFlags) gracePeriodSeconds() *int64 {
	if d.gracePeriod < 0 {
		return nil
	}
	g := int64(d.gracePeriod)
	return &g
}
