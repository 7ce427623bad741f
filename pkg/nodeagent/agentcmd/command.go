// Package agentcmd wires the node agent to the hidden `kubectl tt
// node-agent` command that rollbook's helper pods run.
package agentcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// Environment overrides for the flag defaults, so a runner (the simulator)
// can retarget a helper pod's unchanged command line at a fake host.
const (
	EnvHostRoot       = "ROLLBOOK_HOST_ROOT"
	EnvTerminationLog = "ROLLBOOK_TERMINATION_LOG"
	EnvSMISource      = "ROLLBOOK_TT_SMI_SOURCE"
	EnvNodeName       = "NODE_NAME"
	// EnvVolumeRoot is where a runner that is no kubelet (the simulator)
	// put the pod's other volumes: a mount path P is read at root/P.
	EnvVolumeRoot = "ROLLBOOK_VOLUME_ROOT"
)

func underVolumeRoot(p string) string {
	if root := os.Getenv(EnvVolumeRoot); root != "" {
		return filepath.Join(root, p)
	}
	return p
}

// common holds the flags every subcommand shares.
type common struct {
	hostRoot       string
	node           string
	terminationLog string
}

// NewCommand returns the hidden `node-agent` command with its kmd, smi and
// flash subcommands. Each prints its Result as JSON on stdout, writes it
// to the termination log and exits 0 whether the operation succeeded or
// not (the Result says which); it fails only when it cannot report.
func NewCommand() *cobra.Command {
	c := &common{}
	cmd := &cobra.Command{
		Use:    "node-agent",
		Short:  "Node-side agent run by rollbook helper pods",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	f := cmd.PersistentFlags()
	f.StringVar(&c.hostRoot, "host-root", envOr(EnvHostRoot, nodeagent.DefaultHostRoot),
		"where the host's / is mounted (env "+EnvHostRoot+")")
	f.StringVar(&c.node, "node", os.Getenv(EnvNodeName), "node name to report (env "+EnvNodeName+")")
	f.StringVar(&c.terminationLog, "termination-log", envOr(EnvTerminationLog, nodeagent.DefaultTerminationLog),
		"file to write the JSON result to; empty disables (env "+EnvTerminationLog+")")
	cmd.AddCommand(newKMDCommand(c), newKMDBuildCommand(c), newSMICommand(c), newFlashCommand(c), newProbeCommand(c),
		newCleanCacheCommand(c),
		newRequirementsCommand())
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (c *common) agent(cmd *cobra.Command) (*nodeagent.Agent, error) {
	if c.hostRoot == "" {
		return nil, fmt.Errorf("--host-root must not be empty")
	}
	return &nodeagent.Agent{Root: c.hostRoot, Node: c.node, Log: cmd.ErrOrStderr()}, nil
}

// report prints and persists r. Only a failure to report is an error.
func (c *common) report(cmd *cobra.Command, r nodeagent.Result) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return err
	}
	if c.terminationLog == "" {
		return nil
	}
	if err := nodeagent.WriteTerminationMessage(c.terminationLog, r); err != nil {
		return fmt.Errorf("write termination log %s: %w", c.terminationLog, err)
	}
	return nil
}

// run is the shared RunE body: SIGTERM or SIGINT cancels op.
func (c *common) run(cmd *cobra.Command, op func(context.Context, *nodeagent.Agent) nodeagent.Result) error {
	a, err := c.agent(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return c.report(cmd, op(ctx, a))
}

// runStoppable is run for an operation that changes the device (flash,
// kmd): SIGTERM or SIGINT asks it to stop (Agent.Stop) instead of
// cancelling it, so what it is writing is finished, not cut, and its
// result says what was skipped. The pod's grace period bounds the wait.
func (c *common) runStoppable(cmd *cobra.Command, op func(context.Context, *nodeagent.Agent) nodeagent.Result) error {
	a, err := c.agent(cmd)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if cmd.Context() != nil {
		// Keep its values, not its cancellation on the signal.
		ctx = context.WithoutCancel(cmd.Context())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)
	stop := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sig:
			close(stop)
		case <-done:
		}
	}()
	a.Stop = stop
	return c.report(cmd, op(ctx, a))
}
