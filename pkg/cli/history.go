package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/ui"
)

// HistoryOptions are the flags of `history`.
type HistoryOptions struct {
	g             *Globals
	plugin        string
	LockNamespace string
	Output        string
	RunID         string
	Node          string
}

// NewHistoryCommand returns `history [NODE]`: every mutation of every run,
// from the journal that outlives Events.
func NewHistoryCommand(g *Globals, plugin, defaultNS string) *cobra.Command {
	o := &HistoryOptions{g: g, plugin: plugin}
	cmd := &cobra.Command{
		Use:   "history [NODE]",
		Short: "Every change every run made (who, where, which step, what), oldest first",
		Long: fmt.Sprintf(`Print the durable history of kubectl %[1]s runs: each mutation with its run ID,
user, host, step, object and what changed, plus when each run started and how it ended. It is
kept in the ConfigMap %[2]s in the lock namespace (size-bounded; the oldest entries rotate out),
so it outlives Events, which expire after an hour.`, plugin, journal.Name(plugin)),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.LockNamespace, "lock-namespace", defaultNS, "namespace of the roll's Lease and history")
	AddOutputFlag(cmd, &o.Output, "json", "yaml", "name", "jsonpath")
	cmd.Flags().StringVar(&o.RunID, "run", "", "only this run ID")
	return cmd
}

// Complete takes the optional NODE.
func (o *HistoryOptions) Complete(args []string) error {
	if len(args) == 1 {
		o.Node = strings.TrimPrefix(args[0], "node/")
	}
	return nil
}

// Validate rejects bad flags before any API call.
func (o *HistoryOptions) Validate() error {
	if err := ui.ValidateOutput(o.Output, "json", "yaml", "name", "jsonpath"); err != nil {
		return UsageErrorf("%v", err)
	}
	return nil
}

// Run prints the history.
func (o *HistoryOptions) Run(ctx context.Context) error {
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	entries, rotated, err := journal.Read(ctx, cs, o.LockNamespace, journal.Name(o.plugin))
	if err != nil {
		return fmt.Errorf("read history: %w", err)
	}
	touches := func(e journal.Entry) bool {
		return e.Object == "node/"+o.Node || strings.Contains(e.Message, o.Node)
	}
	runs := map[string]bool{} // runs that touched the node keep their start and end lines
	for _, e := range entries {
		if o.Node != "" && touches(e) {
			runs[e.Run] = true
		}
	}
	var out []journal.Entry
	for _, e := range entries {
		if o.RunID != "" && e.Run != o.RunID {
			continue
		}
		runLine := strings.HasPrefix(e.Object, "lease/") && runs[e.Run]
		if o.Node != "" && !touches(e) && !runLine {
			continue
		}
		out = append(out, e)
	}
	if o.Output != "" {
		// -o name: the objects the history touched, each once, in order.
		var names []string
		seen := map[string]bool{}
		for _, e := range out {
			if e.Object != "" && !seen[e.Object] {
				seen[e.Object] = true
				names = append(names, e.Object)
			}
		}
		return ui.PrintObject(o.g.IOStreams.Out, o.Output, ui.Named(out, names))
	}
	w := o.g.IOStreams.Out
	if len(out) == 0 {
		fmt.Fprintf(w, "no history yet in configmap %s/%s\n", o.LockNamespace, journal.Name(o.plugin))
		return nil
	}
	if rotated > 0 {
		fmt.Fprintf(w, "(%d older entries rotated out)\n", rotated)
	}
	rows := make([][]string, 0, len(out))
	for _, e := range out {
		rows = append(rows, []string{e.Time.Local().Format(time.DateTime), e.Run, e.User + "@" + e.Host,
			dash(e.Step), e.Object, e.Reason, e.Message})
	}
	return ui.Table(w, []string{"time", "run", "who", "step", "object", "what", "detail"}, rows)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
