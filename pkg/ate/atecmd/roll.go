package atecmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/ateapi"
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

func newClonePoolsCommand(g *cli.Globals) *cobra.Command {
	var (
		run    cli.RunFlags
		image  string
		images map[string]string
	)
	cmd := &cobra.Command{
		Use:   "clone-pools --image REF@sha256:…",
		Short: "Create a clone of every serving WorkerPool for the new version (step 4)",
		Example: `  kubectl ate roll clone-pools --image registry.example/ateom-gvisor:v2@sha256:<digest>
  kubectl ate roll clone-pools --image-for gvisor=REF@sha256:… --image-for microvm=REF@sha256:…`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := run.Validate(); err != nil {
				return err
			}
			if image == "" && len(images) == 0 {
				return cli.UsageErrorf("--image or --image-for is required: the new worker image, pinned by digest")
			}
			for _, ref := range append([]string{image}, values(images)...) {
				if ref == "" {
					continue
				}
				if err := ate.ValidateImage(ref); err != nil {
					return cli.UsageErrorf("%v", err)
				}
			}
			imageFor := func(class string) (string, error) {
				if ref, ok := images[class]; ok {
					return ref, nil
				}
				if image != "" {
					return image, nil
				}
				return "", fmt.Errorf("no image for sandbox class %q (pass --image-for %s=REF@sha256:…)", class, class)
			}
			s, ctx, err := cli.StartSession(cmd.Context(), g, run, "ate", ate.LockName)
			if err != nil {
				return err
			}
			dyn, err := dynamicClient(g)
			if err != nil {
				_ = s.Abort()
				return err
			}
			target := runbook.ScopeTarget{Scope: "roll"}
			res := runbook.Run(ctx, ate.CloneRunbook(s.Client, dyn, s.Recorder, imageFor), []runbook.Target{target},
				runbook.Options{RunID: s.RunID, DryRun: run.DryRun, Reporter: s.Progress})
			return s.Finish(res, "kubectl ate preflight && kubectl ate roll next-node")
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "new worker image for every pool, REPO[:TAG]@sha256:<digest>")
	cmd.Flags().StringToStringVar(&images, "image-for", nil, "new worker image per sandbox class, CLASS=REF@sha256:… (repeatable)")
	run.AddFlags(cmd.Flags(), ate.Namespace)
	return cmd
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// nodeFlags tune moving nodes; shared by roll and rollback.
type nodeFlags struct {
	run      cli.RunFlags
	api      apiFlags
	all      bool
	wait     bool
	cfg      ate.NodeConfig
	waitFree time.Duration
}

func (n *nodeFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.BoolVar(&n.all, "all", false, "move every remaining node, one at a time")
	fs.BoolVar(&n.wait, "wait", false, "wait for a free worker of the target version instead of refusing")
	fs.DurationVar(&n.waitFree, "wait-timeout", 30*time.Minute, "with --wait, how long to wait for a free worker")
	fs.IntVar(&n.cfg.MaxConcurrentSuspends, "max-concurrent-suspends", 4, "actors suspended at once")
	fs.DurationVar(&n.cfg.SuspendInterval, "suspend-interval", 0, "pause between starting two suspends (pace the snapshot uploads)")
	fs.BoolVar(&n.cfg.RevertCrashed, "revert-crashed", false, "revert CRASHED actors to their last external snapshot instead of stopping (loses their work since then)")
	fs.DurationVar(&n.cfg.SuspendTimeout, "suspend-timeout", 30*time.Minute, "how long emptying one node may take, kept across re-runs")
	fs.DurationVar(&n.cfg.AteletTimeout, "atelet-timeout", 6*time.Minute, "how long the new atelet may take to be Ready (the old one may hold host ports ~5 min)")
	fs.DurationVar(&n.cfg.VerifyTimeout, "verify-timeout", 5*time.Minute, "how long new workers may take to register")
	n.api.add(fs)
	n.run.AddFlags(fs, ate.Namespace)
}

func (n *nodeFlags) validate() error {
	if err := n.run.Validate(); err != nil {
		return err
	}
	if n.cfg.MaxConcurrentSuspends < 1 {
		return cli.UsageErrorf("--max-concurrent-suspends must be at least 1")
	}
	return nil
}

func newNextNodeCommand(g *cli.Globals) *cobra.Command {
	n := &nodeFlags{}
	cmd := &cobra.Command{
		Use:   "next-node [NODE]",
		Short: "Move the next node (or NODE) from OLD to NEW without losing an actor (step 5)",
		Long: `Move one node from OLD to NEW: resume a half-moved node first, else take the next OLD node.
a) drain its workers; b+c) suspend every actor living there until none is left, then drain
again; d) flip its ate.dev/substrate-version label and wait for the NEW atelet to be Ready;
e) delete its old-pool worker pods (never before d); f) verify new-pool workers registered.
Every node after the first needs a free new-pool worker for the suspended actors (--wait).
Each sub-step is read back from the cluster and the substrate, so an interrupted run resumes
exactly where it stopped.`,
		Example: `  kubectl ate roll next-node --dry-run
  kubectl ate roll next-node
  kubectl ate roll next-node --all --max-concurrent-suspends 8`,
		Args: cobra.MaximumNArgs(1),
		RunE: moveNodesRunE(g, n, ate.RollSides, "kubectl ate roll next-node"),
	}
	n.add(cmd)
	return cmd
}

// moveNodesRunE is the RunE of roll next-node and rollback next-node.
func moveNodesRunE(g *cli.Globals, n *nodeFlags, sidesOf func(*ate.Cluster) (ate.Sides, error), again string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := n.validate(); err != nil {
			return err
		}
		node := ""
		if len(args) == 1 {
			node = args[0]
		}
		return moveNodes(cmd.Context(), g, n, node, sidesOf, again)
	}
}

// moveNodes runs the node runbook on node (or the next one; with --all,
// every remaining one), re-reading the cluster between nodes.
func moveNodes(ctx context.Context, g *cli.Globals, n *nodeFlags, node string, sidesOf func(*ate.Cluster) (ate.Sides, error), again string) error {
	if n.all && node != "" {
		return cli.UsageErrorf("give a NODE or --all, not both")
	}
	s, ctx, err := cli.StartSession(ctx, g, n.run, "ate", ate.LockName)
	if err != nil {
		return err
	}
	dyn, err := dynamicClient(g)
	if err != nil {
		_ = s.Abort()
		return err
	}
	client, err := n.api.dial(ctx, g)
	if err != nil {
		_ = s.Abort()
		return err
	}
	defer client.Close()
	if caps := client.Capabilities(); !caps.DrainImplemented {
		_ = s.Abort()
		return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("the control API does not implement DrainWorker (era %s): this install predates versioned builds and needs a fresh install", caps.Era))
	}
	var total runbook.Result
	total.Runbook, total.RunID, total.DryRun, total.Outcome = ate.NodeRunbookName, s.RunID, n.run.DryRun, runbook.OutcomeDone
	if n.run.DryRun {
		total.Outcome = runbook.OutcomePlanned
	}
	for {
		c, err := ate.ObserveCluster(ctx, s.Client, dyn)
		if err != nil {
			_ = s.Abort()
			return err
		}
		sides, err := sidesOf(c)
		if err != nil {
			_ = s.Abort()
			return cli.WithExitCode(cli.ExitBlocked, err)
		}
		target := node
		if target == "" {
			inv, err := client.Inventory(ctx)
			if err != nil {
				_ = s.Abort()
				return err
			}
			fromPods, err := ate.PoolPods(ctx, s.Client, sides.FromPools)
			if err != nil {
				_ = s.Abort()
				return err
			}
			target = ate.NextNode(c, sides.From, sides.To, sides.FromPools, fromPods, inv)
		}
		if target == "" {
			s.Progress.Printf("every node is at %s", sides.To)
			break
		}
		if n.wait && !sides.FirstNode {
			if err := waitForFreeWorker(ctx, client, s, sides, n.waitFree); err != nil {
				_ = s.Abort()
				return err
			}
		}
		cfg := n.cfg
		cfg.Sides, cfg.RunID = sides, s.RunID
		s.Progress.Printf("node %s: %s → %s", target, sides.From, sides.To)
		res := runbook.Run(ctx, ate.NodeRunbook(s.Client, client, s.Recorder, &cfg),
			[]runbook.Target{runbook.NodeTarget{Client: s.Client, Node: target}},
			runbook.Options{RunID: s.RunID, DryRun: n.run.DryRun, Reporter: s.Progress})
		total.Targets = append(total.Targets, res.Targets...)
		total.Outcome = worse(total.Outcome, res.Outcome)
		if !n.all || n.run.DryRun || res.Outcome != runbook.OutcomeDone || node != "" {
			break
		}
	}
	next := "kubectl ate status"
	if total.Outcome != runbook.OutcomeDone && total.Outcome != runbook.OutcomePlanned {
		next = "fix what is shown above, then re-run: " + again
	} else if !n.all {
		next = again + "   (or `kubectl ate status` to see what is left)"
	}
	return s.Finish(total, next)
}

func worse(a, b runbook.Outcome) runbook.Outcome {
	rank := map[runbook.Outcome]int{runbook.OutcomeDone: 0, runbook.OutcomePlanned: 1, runbook.OutcomeSkipped: 2, runbook.OutcomeBlocked: 3, runbook.OutcomeInterrupted: 4, runbook.OutcomeFailed: 5}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// waitForFreeWorker polls the API (it has no watch) until a worker of the
// target pools is free on a node already at the target version.
func waitForFreeWorker(ctx context.Context, client *ateapi.Client, s *cli.Session, sides ate.Sides, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var nodes []string
	for n := range sides.NodesAtTo {
		nodes = append(nodes, n)
	}
	for delay := time.Second; ; delay = min(2*delay, 10*time.Second) {
		inv, err := client.Inventory(ctx)
		if err != nil {
			return err
		}
		if ate.FreeWorkers(inv, sides.ToPools, nodes) > 0 {
			return nil
		}
		s.Progress.Printf("waiting for a free %s worker on %s …", sides.To, strings.Join(nodes, ","))
		select {
		case <-ctx.Done():
			return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("no free %s worker appeared within %s", sides.To, limit))
		case <-time.After(delay):
		}
	}
}
