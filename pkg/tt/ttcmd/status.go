package ttcmd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/ui"
)

type statusOptions struct {
	g      *cli.Globals
	sel    selectionFlags
	helper helperFlags
	output string
	watch  bool
	probe  bool
	wait   bool
	// timeout bounds --wait; 0 waits as long as it takes.
	timeout time.Duration

	selection tt.Selection
}

func newStatusCommand(g *cli.Globals) *cobra.Command {
	o := &statusOptions{g: g}
	cmd := &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Show every Tenstorrent node: versions, install mode, cordon owner, current step and why it is stuck",
		Example: `  kubectl tt status
  kubectl tt status -o wide --watch
  # In a script: wait for the roll in progress to end; exit 0 done, 3 needs a person, 1 failed
  kubectl tt status --wait --timeout 2h
  kubectl tt status tt-node-3 -o json
  # Measure every node again (a short helper pod each) and show label vs measured
  kubectl tt status --probe`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.sel.add(cmd, g)
	cli.AddOutputFlag(cmd, &o.output, "wide", "json", "yaml", "name", "jsonpath")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "keep watching: a node's row is redrawn when it changes")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for the run in progress (or in the cluster) to end, printing its progress as it "+
		"changes; exit 0 when it finished, 3 when it stopped for a person (blocked, paused), 1 when it failed")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "with --wait: give up after this long (exit 1); 0 waits as long as it takes")
	cmd.Flags().BoolVar(&o.probe, "probe", false, "measure the nodes first (a probe helper pod each; nothing changes on them)")
	o.helper.add(cmd.Flags(), 5*time.Minute)
	return cmd
}

// Complete reads the node arguments.
func (o *statusOptions) Complete(args []string) { o.selection = o.sel.selection(args) }

// Validate rejects bad input before any API call.
func (o *statusOptions) Validate() error {
	if err := ui.ValidateOutput(o.output, "wide", "json", "yaml", "name", "jsonpath"); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	if err := o.selection.Validate(); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	if o.probe && o.watch {
		return cli.UsageErrorf("--probe and --watch do not mix: probe once, then watch")
	}
	if o.wait && (o.watch || o.probe || o.output != "") {
		return cli.UsageErrorf("--wait prints the run's progress and exits by its outcome: it takes neither --watch, --probe nor -o")
	}
	if o.timeout < 0 || o.timeout > 0 && !o.wait {
		return cli.UsageErrorf("--timeout is how long --wait waits: a positive duration, with --wait")
	}
	if err := o.helper.config().Validate(); o.probe && err != nil {
		return cli.UsageErrorf("%v", err)
	}
	return nil
}

// Run measures first when asked, then prints (and with --watch redraws).
func (o *statusOptions) Run(ctx context.Context) error {
	if o.wait {
		cs, err := o.g.Factory.KubernetesClientSet()
		if err != nil {
			return err
		}
		return cli.WaitForRun(ctx, cs, o.g.IOStreams.Out, "tt", "kube-system", tt.LockName, o.timeout)
	}
	if o.probe {
		if err := o.measure(ctx, o.selection); err != nil {
			return err
		}
	}
	return o.print(ctx, o.selection)
}

func (o *statusOptions) print(ctx context.Context, sel tt.Selection) error {
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	md, err := o.g.MetadataClient()
	if err != nil {
		return err
	}
	if o.watch && !ui.Machine(o.output) {
		return o.watchTable(ctx, cs)
	}
	for {
		// The pause note is read alongside the fleet, not after it.
		pause := make(chan string, 1)
		go func() {
			note := ""
			if o.output == "" || o.output == "wide" {
				job := make(chan string, 1)
				go func() { job <- inClusterNote(ctx, cs) }()
				run := cli.RunNote(ctx, cs, "tt", "kube-system", tt.LockName)
				note = strings.TrimSpace(run + "\n" + <-job)
			}
			pause <- note
		}()
		rows, err := tt.Status(ctx, cs, md, sel)
		if err != nil {
			return err
		}
		if err := o.table(ctx, cs, o.g.IOStreams.Out, rows); err != nil {
			return err
		}
		if note := <-pause; note != "" {
			fmt.Fprintln(o.g.IOStreams.Out, note)
		}
		if !o.watch {
			return nil
		}
		// Redraw on the next node change, at most once a second.
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		if err != nil {
			return err
		}
		waitForChange(ctx, w)
		w.Stop()
		if ctx.Err() != nil {
			return nil
		}
		time.Sleep(time.Second)
	}
}

// measure runs the probe runbook in a session of its own (lock, events),
// its progress on stderr, before the table is printed.
func (o *statusOptions) measure(ctx context.Context, sel tt.Selection) error {
	h := o.helper.config()
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	if err := applyAdminParams(ctx, cs, &h, &sel); err != nil {
		return err
	}
	if err := checkHelperPrerequisites(ctx, cs, h); err != nil {
		return err
	}
	s, ctx, err := cli.StartSession(ctx, o.g, cli.RunFlags{LockNamespace: "kube-system"}, "tt", tt.LockName)
	if err != nil {
		return err
	}
	targets, err := tt.ProbeTargets(ctx, s.Client, sel)
	if err != nil {
		return s.Fail(err)
	}
	res := cli.Run(ctx, s, tt.ProbeRunbook(s.Client, s.Recorder, h, s.RunID), targets, runbook.Options{Parallel: 4, KeepGoing: true})
	if res.Outcome != runbook.OutcomeDone {
		return s.Finish(res, "kubectl tt status --probe")
	}
	return s.Fail(nil)
}

func waitForChange(ctx context.Context, w watch.Interface) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.ResultChan():
			if !ok || e.Type != watch.Bookmark {
				return
			}
		}
	}
}

func (o *statusOptions) table(ctx context.Context, cs kubernetes.Interface, out io.Writer, rows []tt.NodeStatus) error {
	if ui.Machine(o.output) {
		names := make([]string, len(rows))
		for i, r := range rows {
			names[i] = "node/" + r.Node
		}
		doc := ui.List{Kind: "NodeStatusList", Items: rows}
		if o.output != "name" {
			run, err := cli.ReadRunInfo(ctx, cs, "kube-system", tt.LockName)
			if err != nil {
				return err
			}
			doc.Extra = map[string]any{"run": run}
		}
		return ui.PrintObject(out, o.output, ui.Named(doc, names))
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(out, noNodes(o.selection))
		return err
	}
	// One write per 64 KiB, not per cell: 5,000 rows are otherwise
	// tens of thousands of write calls.
	buf := bufio.NewWriterSize(out, 64<<10)
	defer buf.Flush()
	tw := tabwriter.NewWriter(buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(o.headers(), "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(o.cells(r), "\t"))
	}
	return tw.Flush()
}

// headers are the table's columns; -o wide adds three.
func (o *statusOptions) headers() []string {
	h := []string{"NODE", "KMD", "TT-SMI", "FIRMWARE", "MODE", "CORDON", "STATE", "WHY"}
	if o.output == "wide" {
		h = append(h, "DEVICES", "SINCE", "RUN")
	}
	return h
}

// cells is r as a table row.
func (o *statusOptions) cells(r tt.NodeStatus) []string {
	c := []string{r.Node, r.KMD, r.SMI, r.Firmware, r.InstallMode, r.Cordon, r.State, r.Why}
	if o.output == "wide" {
		c = append(c, r.DeviceSummary(), r.Since, r.Run)
	}
	return c
}

// noNodes is what status says instead of an empty table: what it looked for.
func noNodes(sel tt.Selection) string {
	var want []string
	if !sel.AnyNode {
		want = append(want, "the NFD label "+tt.LabelPCIPresent+"=true (Node Feature Discovery's Tenstorrent PCI label)")
	}
	if sel.Selector != "" {
		want = append(want, "the selector "+sel.Selector)
	}
	if len(want) == 0 {
		return "No nodes in the cluster."
	}
	s := "No Tenstorrent node: no node has " + strings.Join(want, " and ") + "."
	if !sel.AnyNode {
		s += " Without NFD, --any-node (with -l to choose the nodes) selects nodes by your own labels."
	}
	return s
}
