package ttcmd

import (
	"context"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/tt"
)

type releaseOptions struct {
	g     *cli.Globals
	run   cli.RunFlags
	nodes []string
}

func newReleaseCommand(g *cli.Globals) *cobra.Command {
	o := &releaseOptions{g: g}
	cmd := &cobra.Command{
		Use:   "release [NODE...]",
		Short: "Give back nodes an abandoned run left: its cordon, its closed deploy gates, its bookkeeping",
		Long: `After a run you will not resume, lift only what rollbook set on the nodes: its cordon (never
a cordon someone else set), the deploy-gate labels it closed (put back to their recorded prior
values) and its annotations. Module, firmware and version labels stay as they are.
Without NODE, every node carrying something a tt run left is released.

To retry one node instead, re-run the upgrade with --nodes NODE.`,
		Example: `  kubectl tt release --dry-run
  kubectl tt release tt-node-3`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.nodes = args
			if err := o.run.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
		ValidArgsFunction: cli.NodeCompletion(g),
	}
	o.run.AddFlags(cmd.Flags(), "kube-system")
	return cmd
}

// Run releases the nodes through one session.
func (o *releaseOptions) Run(ctx context.Context) error {
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	var targets []runbook.Target
	for _, n := range o.nodes { // bad names are bad input: found before the session changes anything
		if _, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil {
			return cli.UsageErrorf("node %q: %v", n, err)
		}
		targets = append(targets, runbook.NodeTarget{Client: cs, Node: n})
	}
	s, ctx, err := cli.StartSession(ctx, o.g, o.run, "tt", tt.LockName)
	if err != nil {
		return err
	}
	if len(o.nodes) == 0 {
		l, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return s.Fail(err)
		}
		for i := range l.Items {
			if tt.NeedsRelease(&l.Items[i]) {
				targets = append(targets, runbook.NodeTarget{Client: s.Client, Node: l.Items[i].Name})
			}
		}
		if len(targets) == 0 {
			s.Progress.Printf("no node carries anything a tt run left behind")
		}
	}
	opts := runbook.Options{KeepGoing: true}
	res := cli.Run(ctx, s, tt.ReleaseRunbook(s.Client, s.Recorder), targets, opts)
	return s.Finish(res, "kubectl tt status (a retry of one node: kubectl tt upgrade … --nodes NODE)")
}
