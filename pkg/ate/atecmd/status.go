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

	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/ui"
)

// statusOptions are the flags of status.
type statusOptions struct {
	g      *cli.Globals
	api    apiFlags
	output string
	watch  bool
	noAPI  bool
	wait   bool
	// timeout bounds --wait; 0 waits as long as it takes.
	timeout time.Duration
}

func newStatusCommand(g *cli.Globals) *cobra.Command {
	o := &statusOptions{g: g}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show where the Agent Substrate roll stands and the exact next command",
		Example: `  kubectl ate status
  kubectl ate status -o json
  kubectl ate status --watch
  # In a script: wait for the run in progress to end; exit 0 done, 3 needs a person, 1 failed
  kubectl ate status --wait --timeout 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.api.add(cmd.Flags())
	cli.AddOutputFlag(cmd, &o.output, "wide", "json", "yaml", "name", "jsonpath")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "read again every 2 seconds and redraw the lines that changed")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for the run in progress to end, printing its progress as it changes; exit 0 "+
		"when it finished, 3 when it stopped for a person (blocked, paused), 1 when it failed")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "with --wait: give up after this long (exit 1); 0 waits as long as it takes")
	cmd.Flags().BoolVar(&o.noAPI, "no-api", false, "do not contact the control API (Kubernetes facts only)")
	return cmd
}

// Validate rejects bad flags before any API call.
func (o *statusOptions) Validate() error {
	if err := ui.ValidateOutput(o.output, "wide", "json", "yaml", "name", "jsonpath"); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	if o.wait && (o.watch || ui.Machine(o.output)) {
		return cli.UsageErrorf("--wait prints the run's progress and exits by its outcome: it takes neither --watch nor -o")
	}
	if o.timeout < 0 || o.timeout > 0 && !o.wait {
		return cli.UsageErrorf("--timeout is how long --wait waits: a positive duration, with --wait")
	}
	return nil
}

// Run prints the status once, or with --watch every 2 seconds. One
// connection (one port-forward, one token) serves the whole --watch: a
// redraw only lists workers and actors again.
func (o *statusOptions) Run(ctx context.Context) error {
	if o.wait {
		cs, err := o.g.Factory.KubernetesClientSet()
		if err != nil {
			return err
		}
		return cli.WaitForRun(ctx, cs, o.g.IOStreams.Out, "ate", fleet.Namespace, fleet.LockName, o.timeout)
	}
	r, err := connectReaders(ctx, o.g, &o.api, o.noAPI)
	if err != nil {
		return err
	}
	defer r.close()
	out := o.g.IOStreams.Out
	live := ui.NewLiveText(out)
	for {
		gke, _ := fleet.ParseGKEContext(o.g.ContextName())
		s, err := campaign.ReadStatus(ctx, r.cs, r.dyn, r.md, r.asked(), gke)
		if err != nil {
			return err
		}
		if ui.Machine(o.output) {
			// -o name: the nodes in progress.
			names := make([]string, len(s.Nodes))
			for i, n := range s.Nodes {
				names[i] = "node/" + n.Node
			}
			run, err := cli.ReadRunInfo(ctx, r.cs, fleet.Namespace, fleet.LockName)
			if err != nil {
				return err
			}
			doc := ui.Object{Kind: "Status", Value: s, Extra: map[string]any{"run": run}}
			if err := ui.PrintObject(out, o.output, ui.Named(doc, names)); err != nil {
				return err
			}
		} else if o.watch {
			// Redrawn in place: the lines that changed, no screen clear.
			var b strings.Builder
			printStatus(&b, s, o.output == "wide")
			printGKEAfter(ctx, o.g, &b, s)
			live.Show(b.String())
		} else {
			printStatus(out, s, o.output == "wide")
			printGKEAfter(ctx, o.g, out, s)
		}
		if !o.watch {
			if s.Phase == campaign.PhaseBlocked {
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
}

// actorsUnknown is what status cannot say without the control API.
const actorsUnknown = "actors on old-pool workers and free workers are unknown, and a node drained before its move was " +
	"recorded on it is not seen"

// printStatus prints s for people; wide adds every node's row.
func printStatus(w io.Writer, s *campaign.Status, wide bool) {
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
	fmt.Fprintf(w, "\nNodes per %s: %s\n\n", fleet.VersionLabel, strings.Join(versions, ", "))
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
	if wide && len(c.Nodes) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		// Where a node stands is the node runbook's answer (s.Nodes), not
		// the marks a move leaves on it.
		step := map[string]string{}
		for _, n := range s.Nodes {
			step[n.Node] = n.Direction + ": " + n.Step
		}
		fmt.Fprintln(tw, "NODE\tVERSION\tCORDONED\tIN PROGRESS")
		for _, n := range c.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", n.Name, orDash(n.Version), n.Cordoned, orDash(step[n.Name]))
		}
		_ = tw.Flush()
	}
	if len(s.Nodes) > 0 {
		fmt.Fprintln(w, "\nIn progress:")
		for _, n := range s.Nodes {
			fmt.Fprintf(w, "  %s (at %s, %s): %s\n    to finish it: %s\n    to take it back: %s\n", n.Node, n.Version,
				n.Direction, n.Step, n.Next, n.Back)
		}
	}
	if len(s.Drained) > 0 {
		fmt.Fprintln(w, "\nDrained with no move recorded (serving nothing new; there is no undrain):")
		for _, d := range s.Drained {
			fmt.Fprintf(w, "  %s: %d DRAINING worker(s) %s\n    to recover it: %s\n", d.Node, len(d.Workers),
				fleet.Brief(d.Workers), d.Next())
		}
	}
	switch {
	case s.APIError != "":
		fmt.Fprintf(w, "\n%s control API not consulted: %s; %s\n", st.Warn("!"), s.APIError, actorsUnknown)
	case !s.ActorsRead:
		fmt.Fprintf(w, "\n%s control API not consulted (--no-api); %s\n", st.Warn("!"), actorsUnknown)
	case s.Capabilities != nil:
		fmt.Fprintf(w, "\nControl API: era %s, DrainWorker %v; %d actor(s) on old-pool workers, %d free new-pool worker(s)\n",
			s.Capabilities.Era, s.Capabilities.DrainImplemented, s.ActorsOnOldPools, s.FreeNewWorkers)
	}
	for _, p := range c.Problems {
		fmt.Fprintf(w, "%s %s\n", st.Bad("✗"), p)
	}
	if s.ControlPlane != "" {
		fmt.Fprintf(w, "\n%s %s\n", st.Warn("!"), s.ControlPlane)
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
