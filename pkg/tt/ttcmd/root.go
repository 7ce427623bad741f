// Package ttcmd wires the `kubectl tt` command tree; the runbook logic lives
// in pkg/tt.
package ttcmd

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/nodeagent/agentcmd"
	"github.com/rollbook/rollbook/pkg/tt"
)

const long = `kubectl tt upgrades Tenstorrent node software — the tt-kmd kernel module,
tt-smi and device firmware — one verified step at a time, with no operator
installed. It cordons and drains each node, runs a short-lived helper pod on
it, checks the result, labels the node and uncordons it. Every step is read
back from the cluster, so you can stop at any point and re-run the same
command to continue.`

// NewRootCommand returns `kubectl tt`.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	root, g := cli.NewRoot("tt", "Upgrade Tenstorrent drivers, tt-smi and firmware node by node", long, streams)
	root.AddCommand(newUpgradeCommand(g), newPreflightCommand(g), newStatusCommand(g), newReleaseCommand(g), newLogsCommand(g))
	root.AddCommand(append(cli.NewPauseCommands(g, "tt", tt.LockName, "kube-system"), cli.NewHistoryCommand(g, "tt", "kube-system"))...)
	root.AddCommand(newCleanupCommand(g), newCancelCommand(g))
	root.AddCommand(newInstallCommands(g)...)
	agent := agentcmd.NewCommand()
	agent.Hidden = true
	root.AddCommand(agent)
	cli.AddCompletions(root, g)
	return root
}
