package atecmd

import (
	"context"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
)

// gkeOf reads the GKE node pools from the nodes; nil when not on GKE or
// when the nodes cannot be read (the text is advice, never a gate).
func gkeOf(ctx context.Context, g *cli.Globals) *campaign.GKE {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return nil
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: campaign.GKENodePoolLabel})
	if err != nil {
		return nil
	}
	return campaign.DetectGKE(nodes.Items, g.ContextName())
}

// printGKEBefore prints the runbook's "On GKE" commands, filled in with
// OLD (the oldest atelet DaemonSet's version), when the nodes are GKE's.
func printGKEBefore(ctx context.Context, g *cli.Globals, w io.Writer) {
	k := gkeOf(ctx, g)
	if k == nil {
		return
	}
	old := ""
	if cs, err := g.Factory.KubernetesClientSet(); err == nil {
		if dyn, err := dynamicClient(g); err == nil {
			if c, err := fleet.ObserveCluster(ctx, cs, dyn); err == nil {
				old = c.Old
			}
		}
	}
	fmt.Fprintln(w, k.BeforeRoll(old))
}

// printGKEAfter prints the "After the roll, on GKE" commands once every
// node is at NEW.
func printGKEAfter(ctx context.Context, g *cli.Globals, w io.Writer, s *campaign.Status) {
	v, due := campaign.GKEAfterRollDue(s.Cluster)
	if !due {
		return
	}
	if k := gkeOf(ctx, g); k != nil {
		fmt.Fprintln(w, "\n"+k.AfterRoll(v))
	}
}
