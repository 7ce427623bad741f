// Package atecmd wires the `kubectl ate` command tree; the runbook logic
// lives in pkg/ate.
package atecmd

import (
	"context"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/pkg/ate/atecmd/apicmd"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
)

const long = `kubectl ate runs the Agent Substrate rolling upgrade: it prepares the new
dataplane, clones the worker pools, and moves nodes from the old version to
the new one without losing an actor — draining workers and suspending actors
through the substrate control API before each node's label is flipped.
Progress is read back from the cluster and the substrate, so you can stop at
any point and re-run the same command to continue.`

// NewRootCommand returns `kubectl ate`.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	root, g := cli.NewRoot("ate", "Roll Agent Substrate nodes to a new version without losing actors", long, streams)
	root.AddCommand(newStatusCommand(g), newPreflightCommand(g), newRollCommand(g), newRollbackCommand(g), newRetireCommand(g),
		newRevertCommand(g))
	root.AddCommand(newRecoverNodeCommand(g))
	root.AddCommand(append(cli.NewPauseCommands(g, "ate", fleet.LockName, fleet.Namespace),
		cli.NewHistoryCommand(g, "ate", fleet.Namespace))...)
	root.AddCommand(cli.NewCleanupCommand(g, cli.CleanupSpec{Plugin: "ate", LockName: fleet.LockName, DefaultLockNamespace: fleet.Namespace,
		NodeAnnotations: campaign.CleanupAnnotations, HalfWay: halfWay(g), Finish: campaign.FinishHint}))
	root.AddCommand(apicmd.NewCommand(g))
	root.AddCommand(newInstallCommands(g)...)
	cli.AddCompletions(root, g)
	return root
}

// halfWay is cleanup's question to the node runbook's Locator: which nodes
// stand half-way, and where (campaign.HalfWay).
func halfWay(g *cli.Globals) func(context.Context, []corev1.Node) (map[string]string, error) {
	return func(ctx context.Context, _ []corev1.Node) (map[string]string, error) {
		cs, err := g.Factory.KubernetesClientSet()
		if err != nil {
			return nil, err
		}
		dyn, err := dynamicClient(g)
		if err != nil {
			return nil, err
		}
		return campaign.HalfWay(ctx, cs, dyn)
	}
}
