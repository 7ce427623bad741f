package atecmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
)

// rollbackOptions are the flags of rollback.
type rollbackOptions struct {
	nodeOptions
	controlPlaneReverted bool
}

func newRollbackCommand(g *cli.Globals) *cobra.Command {
	o := &rollbackOptions{}
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Undo the roll in the runbook's order: control plane, nodes, clones, NEW atelet, controller",
		Long: `Undo the roll from wherever it stands, in the runbook's order, in one session:
0) once every node reached NEW, step 6 may have upgraded the control plane: no node moves until
   you ran "deploy apiserver" from the OLD release's checkout and say so with
   --control-plane-reverted (pass it too if step 6 never ran);
1) every node at NEW is moved back to OLD exactly as roll next-node moves it forward, with the
   sides swapped: drain, suspend its actors, re-drain, flip the label back to OLD, wait for the
   OLD atelet, delete the node's new-pool pods, verify;
2) each clone (pool pinned to NEW) is deleted, once no actor is bound to one of its workers;
3) the NEW atelet DaemonSet is deleted, once no node carries NEW;
4) "deploy ate-system" and then "deploy ate-controller" (OLD checkout) are printed; re-run
   kubectl ate rollback afterwards: only then can a stray third atelet DaemonSet appear, and it
   is checked for.
The old pools and the old atelet DaemonSet are never touched. Re-run to resume after a stop.`,
		Example: `  kubectl ate rollback --dry-run
  kubectl ate rollback --wait
  kubectl ate rollback --control-plane-reverted   # after deploy apiserver from the OLD checkout
  kubectl ate rollback next-node                  # one node only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), g)
		},
	}
	o.add(cmd)
	cmd.Flags().BoolVar(&o.controlPlaneReverted, "control-plane-reverted", false,
		"deploy apiserver ran from the OLD release's checkout (or step 6 never ran): nodes may move back")
	cmd.AddCommand(newRollbackNextNodeCommand(g))
	return cmd
}

func (o *rollbackOptions) Run(ctx context.Context, g *cli.Globals) error {
	if err := checkMovePermissions(ctx, g, o.run); err != nil {
		return err
	}
	s, ctx, err := cli.StartSession(ctx, g, o.run, "ate", fleet.LockName)
	if err != nil {
		return err
	}
	c, closeAPI, err := rollClients(ctx, g, s, &o.api, o.run.DryRun)
	if err != nil {
		return s.Fail(err)
	}
	defer closeAPI()
	before, err := fleet.ObserveCluster(ctx, c.Client, c.Dynamic)
	if err != nil {
		return s.Fail(err)
	}
	// The runbook's order: every node back (the control plane first, see
	// roll.NodeRoll), then the clones and the NEW atelet, in one session.
	res := runbook.Result{Runbook: roll.RollbackRunbookName, RunID: s.RunID, DryRun: o.run.DryRun, Outcome: runbook.OutcomeDone}
	if before.New != "" || len(before.Problems) > 0 {
		o.move.Direction, o.move.All, o.move.Node = node.Rollback, true, ""
		o.move.ControlPlaneReverted = o.controlPlaneReverted
		nodes, err := o.moveNodes(ctx, s, c)
		if err != nil {
			return s.Fail(blockedExit(err))
		}
		res = nodes
		if nodes.Outcome == runbook.OutcomeDone || nodes.Outcome == runbook.OutcomePlanned && len(nodes.Targets) == 0 {
			cluster := cli.Run(ctx, s, roll.RollbackRunbook(c.Client, c.Dynamic, c.API, c.Recorder), rollScope(), runbook.Options{})
			res = runbook.Merge(roll.RollbackRunbookName, nodes, cluster)
		}
	}
	info := g.IOStreams.Out
	if o.run.Output != "" {
		info = g.IOStreams.ErrOut
	}
	next := "run the commands below from the OLD release's checkout, then: kubectl ate rollback"
	if before.New == "" {
		next = "nothing left to roll back"
	}
	if res.Outcome != runbook.OutcomeDone && res.Outcome != runbook.OutcomePlanned {
		next = "fix what is shown above, then re-run: kubectl ate rollback"
	}
	if err := s.Finish(res, next); err != nil || o.run.DryRun {
		return err
	}
	if before.New != "" {
		gke, _ := fleet.ParseGKEContext(s.ContextName())
		printExternal(info, before.Old, gke)
		return nil
	}
	// Nothing was left to move: the user's commands ran, so now a stray
	// third atelet DaemonSet would show.
	return checkStrays(info, before, before.Old)
}

func newRollbackNextNodeCommand(g *cli.Globals) *cobra.Command {
	n := &nodeOptions{}
	n.move.Direction = node.Rollback
	cmd := &cobra.Command{
		Use:   "next-node [NODE]",
		Short: "Move the next node at NEW (or NODE) back to OLD without losing an actor",
		Long: `The mirror of roll next-node: resume a half-moved node first, else take a node at NEW; drain
its workers, suspend every actor living there, drain again, flip its label back to OLD, wait for
the OLD atelet to be Ready, delete its new-pool worker pods, verify the old pool's workers
registered. Every node after the first needs enough free workers of each pool lineage (--wait).`,
		Example: `  kubectl ate rollback next-node --dry-run
  kubectl ate rollback next-node kwok-node-2
  kubectl ate rollback next-node --all --wait`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n.Complete(args)
			if err := n.Validate(); err != nil {
				return err
			}
			if cli.OutsideSchedule(cmd.Flags(), g, "ate") {
				return nil
			}
			return n.Run(cmd.Context(), g, "kubectl ate rollback next-node")
		},
	}
	n.add(cmd)
	cmd.Flags().BoolVar(&n.move.ControlPlaneReverted, "control-plane-reverted", false,
		"deploy apiserver ran from the OLD release's checkout (or step 6 never ran): nodes may move back")
	return cmd
}

func printExternal(w io.Writer, old string, gke fleet.GKELocation) {
	st := ui.NewStyle(w)
	fmt.Fprintf(w, "\n%s\n", st.Bold("Left to you, from a checkout of the OLD release ("+old+
		") with the install's environment (VERSION="+old+" if the install pinned it), in this order:"))
	for i, e := range roll.RollbackExternalSteps(old, gke) {
		fmt.Fprintf(w, "  %d. %s\n     %s\n", i+1, e.When, e.Command)
	}
}

// checkStrays reports atelet DaemonSets of any version but old: after a
// rollback, one means the old checkout computed another version.
func checkStrays(w io.Writer, c *fleet.Cluster, old string) error {
	st := ui.NewStyle(w)
	strays := roll.StrayAtelets(c, old)
	if len(strays) == 0 {
		fmt.Fprintf(w, "%s one atelet DaemonSet, at %s\n", st.OK("✓"), old)
		return nil
	}
	for _, a := range strays {
		fmt.Fprintf(w, "%s atelet DaemonSet %s is at %q, not %s: the OLD checkout computed another version.\n"+
			"      → kubectl delete daemonset -n %s %s, then check VERSION (VERSION=%s) before running ate-setup again\n",
			st.Bad("✗"), a.Name, a.Version, old, fleet.Namespace, a.Name, old)
	}
	return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%d stray atelet DaemonSet(s) besides %s", len(strays), old))
}
