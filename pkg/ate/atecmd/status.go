package atecmd

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/ui"
)

func newStatusCommand(g *cli.Globals) *cobra.Command {
	var (
		api    apiFlags
		output string
		watch  bool
		noAPI  bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show where the Agent Substrate roll stands and the exact next command",
		Example: `  kubectl ate status
  kubectl ate status -o json
  kubectl ate status --watch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ui.ValidateOutput(output, "json", "yaml"); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			ctx := cmd.Context()
			// One connection (one port-forward, one token) for the whole
			// --watch: a redraw only lists workers and actors again.
			var client *ateapi.Client
			var dialErr error
			if !noAPI {
				if client, dialErr = api.dial(ctx, g); dialErr == nil {
					defer client.Close()
				}
			}
			for {
				s, err := observeStatus(ctx, g, client, dialErr)
				if err != nil {
					return err
				}
				if watch && output == "" && ui.IsTerminal(g.IOStreams.Out) {
					fmt.Fprint(g.IOStreams.Out, "\033[H\033[2J")
				}
				if output != "" {
					if err := ui.PrintObject(g.IOStreams.Out, output, s); err != nil {
						return err
					}
				} else {
					printStatus(g.IOStreams.Out, s)
					printGKEAfter(ctx, g, g.IOStreams.Out, s)
				}
				if !watch {
					if s.Phase == ate.PhaseBlocked {
						return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("the roll cannot proceed: %s", s.Summary))
					}
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(2 * time.Second):
				}
			}
		},
	}
	api.add(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json|yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw every 2 seconds")
	cmd.Flags().BoolVar(&noAPI, "no-api", false, "do not contact the control API (Kubernetes facts only)")
	return cmd
}

func observeStatus(ctx context.Context, g *cli.Globals, client *ateapi.Client, dialErr error) (*ate.Status, error) {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamicClient(g)
	if err != nil {
		return nil, err
	}
	c, err := ate.ObserveCluster(ctx, cs, dyn)
	if err != nil {
		return nil, err
	}
	var inv *ateapi.Inventory
	var caps *ateapi.Capabilities
	apiErr := dialErr
	if client != nil {
		cp := client.Capabilities()
		caps = &cp
		inv, apiErr = client.Inventory(ctx)
	}
	s, err := ate.ObserveStatus(ctx, cs, c, inv)
	if err != nil {
		return nil, err
	}
	s.Capabilities = caps
	if apiErr != nil {
		s.APIError = apiErr.Error()
	}
	return s, nil
}

func printStatus(w io.Writer, s *ate.Status) {
	st := ui.NewStyle(w)
	c := s.Cluster
	head := fmt.Sprintf("Agent Substrate roll: OLD %s", orDash(c.Old))
	if c.New != "" {
		head += " → NEW " + c.New
	}
	fmt.Fprintf(w, "%s\nPhase: %s — %s\n\n", st.Bold(head), st.Bold(string(s.Phase)), s.Summary)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ATELET DAEMONSET\tVERSION\tDESIRED\tREADY")
	for _, a := range c.Atelets {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", a.Name, orDash(a.Version), a.Desired, a.Ready)
	}
	_ = tw.Flush()
	var versions []string
	for v, n := range s.Counts {
		versions = append(versions, fmt.Sprintf("%s: %d", orDash(v), n))
	}
	sort.Strings(versions)
	fmt.Fprintf(w, "\nNodes per %s: %s\n\n", ate.VersionLabel, strings.Join(versions, ", "))
	if len(c.Pools) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POOL\tPIN\tREADY/DESIRED\tCLONE")
		for _, p := range c.Pools {
			clone := p.CloneName
			if p.ClonedFrom != "" {
				clone = "(clone of " + p.ClonedFrom + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\n", p.Key(), orDash(p.Pin), p.Ready, p.Desired, orDash(clone))
		}
		_ = tw.Flush()
	}
	if len(s.Nodes) > 0 {
		fmt.Fprintln(w, "\nIn progress:")
		for _, n := range s.Nodes {
			fmt.Fprintf(w, "  %s (%s): %s\n", n.Node, n.Version, n.Step)
		}
	}
	if s.APIError != "" {
		fmt.Fprintf(w, "\n%s control API not consulted: %s\n", st.Warn("!"), s.APIError)
	} else if s.Capabilities != nil {
		fmt.Fprintf(w, "\nControl API: era %s, DrainWorker %v; %d actor(s) on old-pool workers, %d free new-pool worker(s)\n",
			s.Capabilities.Era, s.Capabilities.DrainImplemented, s.ActorsOnOldPools, s.FreeNewWorkers)
	}
	for _, p := range c.Problems {
		fmt.Fprintf(w, "%s %s\n", st.Bad("✗"), p)
	}
	fmt.Fprintf(w, "\nNot observable (re-running them is safe): %s\n", strings.Join(s.Unobservable, "; "))
	fmt.Fprintf(w, "Next: %s\n", st.Bold(s.Next))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
