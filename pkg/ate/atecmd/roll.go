package atecmd

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func newRollCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "roll",
		Short: "Clone the pools and move nodes to the new version, one at a time",
	}
	cmd.AddCommand(newClonePoolsCommand(g), newNextNodeCommand(g))
	return cmd
}

// cloneOptions are the flags of roll clone-pools.
type cloneOptions struct {
	run    cli.RunFlags
	images []string
	refs   roll.Images
	// badImages is why --image did not parse (Complete), reported by Validate.
	badImages error
}

// Complete parses the images; Validate reports what did not parse.
func (o *cloneOptions) Complete() {
	o.refs, o.badImages = roll.ParseImages(o.images)
}

func (o *cloneOptions) Validate() error {
	if err := o.run.Validate(); err != nil {
		return err
	}
	if len(o.images) == 0 {
		return cli.UsageErrorf("--image is required: the new worker image per sandbox class, CLASS=REF@sha256:… (repeatable)")
	}
	if o.badImages != nil {
		return cli.UsageErrorf("%v", o.badImages)
	}
	return nil
}

func (o *cloneOptions) Run(ctx context.Context, g *cli.Globals) error {
	if err := requireSubstrate(ctx, g, o.run); err != nil {
		return err
	}
	s, ctx, err := cli.StartSession(ctx, g, o.run, "ate", fleet.LockName)
	if err != nil {
		return err
	}
	dyn, err := dynamicClient(g)
	if err != nil {
		return s.Fail(err)
	}
	res := cli.Run(ctx, s, roll.CloneRunbook(s.Client, dyn, s.Recorder, o.refs), []runbook.Target{runbook.ScopeTarget{Scope: "roll"}},
		runbook.Options{})
	return s.Finish(res, "kubectl ate preflight && kubectl ate roll next-node")
}

func newClonePoolsCommand(g *cli.Globals) *cobra.Command {
	o := &cloneOptions{}
	cmd := &cobra.Command{
		Use:   "clone-pools --image CLASS=REF@sha256:…",
		Short: "Create a clone of every serving WorkerPool for the new version (step 4)",
		Long: `Clone every serving WorkerPool for NEW: same namespace, labels and spec, the new worker image of
the pool's sandbox class and the NEW pin. Give one --image CLASS=REF@sha256:… per sandbox class the
serving pools use; a bare REF@sha256:… is accepted only when every serving pool has the same class.`,
		Example: `  kubectl ate roll clone-pools --image gvisor=registry.example/ateom-gvisor:v2@sha256:<digest> \
      --image microvm=registry.example/ateom-microvm:v2@sha256:<digest>
  kubectl ate roll clone-pools --image registry.example/ateom-gvisor:v2@sha256:<digest>   # one class only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), g)
		},
	}
	cmd.Flags().StringArrayVar(&o.images, "image", nil, "new worker image, CLASS=REPO[:TAG]@sha256:<digest> (repeatable), "+
		"or a bare ref when every serving pool has one sandbox class")
	o.run.AddFlags(cmd.Flags(), fleet.Namespace)
	return cmd
}

// nodeOptions tune moving nodes; shared by roll and rollback.
type nodeOptions struct {
	run  cli.RunFlags
	api  apiFlags
	move roll.NodeRollOptions
	soak cli.SoakFlags
}

func (n *nodeOptions) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	c := &n.move.Config
	fs.BoolVar(&n.move.All, "all", false, "move every remaining node, one at a time")
	fs.BoolVar(&n.move.Wait, "wait", false, "wait for enough free workers of each pool lineage instead of refusing")
	fs.DurationVar(&n.move.WaitTimeout, "wait-timeout", 30*time.Minute, "with --wait, how long to wait for free workers")
	fs.IntVar(&c.MaxConcurrentSuspends, "max-concurrent-suspends", 4, "actors suspended at once")
	fs.DurationVar(&c.SuspendInterval, "suspend-interval", 0, "pause between starting two suspends (pace the snapshot uploads)")
	fs.BoolVar(&c.RevertCrashed, "revert-crashed", false,
		"revert CRASHED actors to their last external snapshot instead of stopping (loses their work since then)")
	fs.DurationVar(&c.SuspendTimeout, "suspend-timeout", 30*time.Minute, "how long emptying one node may take, kept across re-runs; "+
		"at the suspend pace measured before, a node whose actors cannot fit is refused before its drain, and a run stops "+
		"once the actors left cannot fit what is left")
	fs.DurationVar(&c.AteletTimeout, "atelet-timeout", 6*time.Minute,
		"how long the new atelet may take to be Ready (the old one may hold host ports ~5 min)")
	fs.DurationVar(&c.DeleteTimeout, "delete-timeout", 10*time.Minute,
		"how long the node's old-pool pods may take to go after the flip (a finalizer may hold one), kept across re-runs")
	fs.DurationVar(&c.VerifyTimeout, "verify-timeout", 5*time.Minute, "how long new workers may take to register")
	fs.DurationVar(&c.PullTimeout, "pull-timeout", roll.DefaultPullTimeout, "how long pulling a clone's images may take on the "+
		"first node of each platform (os/arch), before a node of it moves; an image with no build for the platform stops the roll")
	fs.DurationVar(&c.RegisterTimeout, "register-timeout", 2*time.Minute,
		"how long a worker pod of the pools the node leaves may stay unregistered before the flip; then it is taken as "+
			"never registering (it holds no actor): the node is cordoned and the pod deleted, its pool replaces it elsewhere")
	n.api.add(fs)
	n.run.AddFlags(fs, fleet.Namespace)
	n.soak.AddFlags(fs)
}

func (n *nodeOptions) Complete(args []string) {
	if len(args) == 1 {
		n.move.Node = args[0]
	}
}

func (n *nodeOptions) Validate() error {
	if err := n.run.Validate(); err != nil {
		return err
	}
	if err := n.soak.Validate(); err != nil {
		return err
	}
	if n.move.Config.MaxConcurrentSuspends < 1 {
		return cli.UsageErrorf("--max-concurrent-suspends must be at least 1")
	}
	if n.move.All && n.move.Node != "" {
		return cli.UsageErrorf("give a NODE or --all, not both")
	}
	if n.move.Node != "" {
		return validNodeName(n.move.Node)
	}
	return nil
}

// Run moves nodes in one session; again is the command that resumes.
func (n *nodeOptions) Run(ctx context.Context, g *cli.Globals, again string) error {
	// A missing substrate is named instead of what it makes fail: at once
	// for a dry run (which takes no lock to fail on), after a failure
	// otherwise (a read fewer for every node rolled).
	orNoSubstrate := func(err error) error {
		if serr := requireSubstrate(ctx, g, n.run); serr != nil {
			return serr
		}
		return err
	}
	if n.run.DryRun {
		if err := requireSubstrate(ctx, g, n.run); err != nil {
			return err
		}
	}
	if err := requireNode(ctx, g, n.move.Node); err != nil {
		return orNoSubstrate(err)
	}
	if err := checkMovePermissions(ctx, g, n.run); err != nil {
		return orNoSubstrate(err)
	}
	s, ctx, err := cli.StartSession(ctx, g, n.run, "ate", fleet.LockName)
	if err != nil {
		return orNoSubstrate(err)
	}
	c, closeAPI, err := rollClients(ctx, g, s, &n.api, n.run.DryRun)
	if err != nil {
		return s.Fail(err)
	}
	defer closeAPI()
	res, err := n.moveNodes(ctx, s, c)
	if err != nil {
		return s.Fail(blockedExit(err))
	}
	next := "kubectl ate status"
	if res.Outcome != runbook.OutcomeDone && res.Outcome != runbook.OutcomePlanned {
		next = "fix what is shown above, then re-run: " + again
	} else if !n.move.All {
		next = again + "   (or `kubectl ate status` to see what is left)"
	}
	return s.Finish(res, next)
}

func newNextNodeCommand(g *cli.Globals) *cobra.Command {
	n := &nodeOptions{}
	cmd := &cobra.Command{
		Use:   "next-node [NODE]",
		Short: "Move the next node (or NODE) from OLD to NEW without losing an actor (step 5)",
		Long: `Move one node from OLD to NEW: resume a half-moved node first, else take the next OLD node.
Refused (exit 3, nothing changed) unless both atelet DaemonSets exist, every serving pool is pinned
to OLD and has a clone pinned to NEW with its Deployment, and the cluster has more than one node
(or --allow-full-stop); NODE is refused while another node is half-moved.
a) drain its workers; b+c) suspend every actor living there until none is left, then drain
again; d) flip its ate.dev/substrate-version label and wait for the NEW atelet to be Ready;
e) delete its old-pool worker pods (never before d); f) verify new-pool workers registered.
Every node after the first needs enough free workers of each pool lineage elsewhere for the
actors it suspends (--wait). Each sub-step is read back from the cluster and the substrate,
so an interrupted run resumes exactly where it stopped.`,
		Example: `  kubectl ate roll next-node --dry-run
  kubectl ate roll next-node
  kubectl ate roll next-node --all --wait --max-concurrent-suspends 8`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n.Complete(args)
			if err := n.Validate(); err != nil {
				return err
			}
			if cli.OutsideSchedule(cmd.Flags(), g, "ate") {
				return nil
			}
			return n.Run(cmd.Context(), g, "kubectl ate roll next-node")
		},
	}
	n.add(cmd)
	cmd.Flags().BoolVar(&n.move.AllowFullStop, "allow-full-stop", false,
		"accept a single-node cluster, where moving the node suspends every actor at once")
	return cmd
}

// moveNodes moves nodes the way n says, one at a time, in session s: the
// node runbook over the nodes roll.NodeRoll picks as each may start.
func (n *nodeOptions) moveNodes(ctx context.Context, s *cli.Session, c roll.Clients) (runbook.Result, error) {
	n.move.Config.RunID = s.RunID
	n.move.Config.ReplaceInPlace = func(ctx context.Context, node string) (func(), error) {
		return declareReplacing(ctx, s, node)
	}
	n.move.DryRun, n.move.Say = n.run.DryRun, s.Progress.Printf
	n.move.GKE, _ = fleet.ParseGKEContext(s.ContextName())
	nr := roll.NewNodeRoll(c, n.move)
	var o runbook.Options
	if err := s.ApplySoak(&o, n.soak, nr.Health); err != nil {
		return runbook.Result{}, err
	}
	res := cli.RunSource(ctx, s, nr.Run().Runbook(), nr.Nodes(ctx), o)
	return res, nr.Err()
}

// blockedExit gives a refusal (runbook.Blocked) exit code 3.
func blockedExit(err error) error {
	if runbook.IsBlocked(err) {
		return cli.WithExitCode(cli.ExitBlocked, err)
	}
	return err
}
