package atecmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
)

func newRollbackCommand(g *cli.Globals) *cobra.Command {
	n := &nodeFlags{}
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Undo the roll in reverse order: nodes back to OLD, then the clones, then the NEW atelet",
		Long: `Undo the roll from wherever it stands, in reverse order (read from the cluster, as status does):
1) every node at NEW is moved back to OLD exactly as roll next-node moves it forward, with the
   sides swapped: drain, suspend its actors, re-drain, flip the label back to OLD, wait for the
   OLD atelet, delete the node's new-pool pods, verify;
2) each clone (pool pinned to NEW) is deleted, once no actor is bound to one of its workers;
3) the NEW atelet DaemonSet is deleted, once no node carries NEW;
4) the control-plane and ate-controller commands to run from the OLD release's checkout are
   printed, and the atelet DaemonSets are checked for a stray third one.
The old pools and the old atelet DaemonSet are never touched. Re-run to resume after a stop.
With -o json|yaml, the node result and the cluster result print as two documents.`,
		Example: `  kubectl ate rollback --dry-run
  kubectl ate rollback --wait
  kubectl ate rollback next-node            # one node only
  kubectl ate rollback next-node --all      # every node, not the pools or the DaemonSet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := n.validate(); err != nil {
				return err
			}
			return rollbackAll(cmd.Context(), g, n)
		},
	}
	n.add(cmd)
	cmd.AddCommand(newRollbackNextNodeCommand(g))
	return cmd
}

func newRollbackNextNodeCommand(g *cli.Globals) *cobra.Command {
	n := &nodeFlags{}
	cmd := &cobra.Command{
		Use:   "next-node [NODE]",
		Short: "Move the next node at NEW (or NODE) back to OLD without losing an actor",
		Long: `The mirror of roll next-node: resume a half-moved node first, else take a node at NEW; drain
its workers, suspend every actor living there, drain again, flip its label back to OLD, wait for
the OLD atelet to be Ready, delete its new-pool worker pods, verify the old pool's workers
registered. Every node after the first needs a free old-pool worker (--wait).`,
		Example: `  kubectl ate rollback next-node --dry-run
  kubectl ate rollback next-node kwok-node-2
  kubectl ate rollback next-node --all --wait`,
		Args: cobra.MaximumNArgs(1),
		RunE: moveNodesRunE(g, n, ate.RollbackSides, "kubectl ate rollback next-node"),
	}
	n.add(cmd)
	return cmd
}

// rollbackAll moves every node back, then runs the cluster steps, then
// prints what is left to the user and checks for a stray DaemonSet.
func rollbackAll(ctx context.Context, g *cli.Globals, n *nodeFlags) error {
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
	info := g.IOStreams.Out
	if n.run.Output != "" {
		info = g.IOStreams.ErrOut
	}
	if len(c.Problems) > 0 {
		for _, p := range c.Problems {
			fmt.Fprintf(info, "%s %s\n", ui.NewStyle(info).Bad("✗"), p)
		}
		return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("the rollback cannot proceed until the problems above are fixed"))
	}
	old := c.Old
	if c.New == "" {
		fmt.Fprintf(info, "Nothing to roll back in the cluster: one atelet DaemonSet (%s), no node or pool on another version.\n", old)
		printExternal(info, old)
		return nil
	}
	// 1. The nodes, one at a time, through the same code as roll next-node.
	nodes := *n
	nodes.all = true
	if err := moveNodes(ctx, g, &nodes, "", ate.RollbackSides, "kubectl ate rollback"); err != nil {
		return err
	}
	// 2+3. The clones, then the NEW atelet.
	// sctx ends with the session; the stray check after Finish uses ctx.
	s, sctx, err := cli.StartSession(ctx, g, n.run, "ate", ate.LockName)
	if err != nil {
		return err
	}
	client, err := n.api.dial(sctx, g)
	if err != nil {
		_ = s.Abort()
		return err
	}
	defer client.Close()
	res := runbook.Run(sctx, ate.RollbackRunbook(s.Client, dyn, client, s.Recorder), []runbook.Target{runbook.ScopeTarget{Scope: "roll"}},
		runbook.Options{RunID: s.RunID, DryRun: n.run.DryRun, Reporter: s.Progress})
	next := "run the commands below from the OLD release's checkout"
	if res.Outcome != runbook.OutcomeDone && res.Outcome != runbook.OutcomePlanned {
		next = "fix what is shown above, then re-run: kubectl ate rollback"
	}
	if n.run.Output == "yaml" {
		fmt.Fprintln(g.IOStreams.Out, "---") // the node result came first
	}
	if err := s.Finish(res, next); err != nil || n.run.DryRun {
		return err
	}
	// 4. What only the user can do, then the stray DaemonSet check.
	printExternal(info, old)
	after, err := ate.ObserveCluster(ctx, cs, dyn)
	if err != nil {
		return err
	}
	return checkStrays(info, after, old)
}

func printExternal(w io.Writer, old string) {
	st := ui.NewStyle(w)
	fmt.Fprintf(w, "\n%s\n", st.Bold("Left to you, from a checkout of the OLD release ("+old+") with the install's environment (VERSION="+old+" if the install pinned it), in this order:"))
	for i, e := range ate.RollbackExternalSteps(old) {
		fmt.Fprintf(w, "  %d. %s\n     %s\n", i+1, e.When, e.Command)
	}
	fmt.Fprintf(w, "Then check that no third atelet DaemonSet appeared: kubectl get ds -n %s -l %s=%s -L %s   (or re-run kubectl ate rollback)\n",
		ate.Namespace, ate.AppLabel, ate.AteletApp, ate.VersionLabel)
}

// checkStrays reports atelet DaemonSets of any version but old: after a
// rollback, one means the old checkout computed another version.
func checkStrays(w io.Writer, c *ate.Cluster, old string) error {
	st := ui.NewStyle(w)
	strays := ate.StrayAtelets(c, old)
	if len(strays) == 0 {
		fmt.Fprintf(w, "%s one atelet DaemonSet, at %s\n", st.OK("✓"), old)
		return nil
	}
	for _, a := range strays {
		fmt.Fprintf(w, "%s atelet DaemonSet %s is at %q, not %s: the OLD checkout computed another version.\n      → kubectl delete daemonset -n %s %s, then check VERSION (VERSION=%s) before running ate-setup again\n",
			st.Bad("✗"), a.Name, a.Version, old, ate.Namespace, a.Name, old)
	}
	return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%d stray atelet DaemonSet(s) besides %s", len(strays), old))
}
