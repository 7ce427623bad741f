package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// --metrics-bind-address: the run serves its progress in Prometheus's text
// exposition format (version 0.0.4) while it runs, for an --in-cluster run
// a scrape can reach. Only counts and durations are served: no node's
// records, no URL, no credential.

func (f *SoakFlags) addMetricsFlag(fs *pflag.FlagSet) {
	fs.StringVar(&f.MetricsAddr, "metrics-bind-address", "", "serve the run's progress (nodes done, stopped and in progress, "+
		"the ETA, each step's durations) as Prometheus metrics at http://ADDRESS/metrics while it runs, e.g. :9400 "+
		"(an --in-cluster run serves them on its pod's port 9400); \"\" or 0 serves none")
}

// validMetricsAddr accepts "" and "0" (off) or host:port with a port
// number (0 picks a free one).
func validMetricsAddr(a string) error {
	if a == "" || a == "0" {
		return nil
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return UsageErrorf("--metrics-bind-address %q: want HOST:PORT or :PORT (%v)", a, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return UsageErrorf("--metrics-bind-address %q: the port must be a number from 0 to 65535", a)
	}
	return nil
}

// runMetrics is what the run serves: the progress reporter's counts (set
// once the run starts), the targets in progress and each step's measured
// durations, gathered from the run's reports.
type runMetrics struct {
	plugin, run string
	addr        string // where it is served
	progress    atomic.Pointer[progressReporter]
	mu          sync.Mutex
	acting      map[string]bool // targets with a step acted on, not finished
	stepSum     map[string]float64
	stepCount   map[string]int
	outcome     runbook.Outcome
}

func newRunMetrics(plugin, run string) *runMetrics {
	return &runMetrics{plugin: plugin, run: run, acting: map[string]bool{}, stepSum: map[string]float64{},
		stepCount: map[string]int{}}
}

// metricsReporter feeds m from the run's reports and passes them on.
type metricsReporter struct {
	runbook.Reporter
	m *runMetrics
}

func (r metricsReporter) Step(target string, s runbook.StepResult) {
	if s.Status == runbook.StepActing {
		r.m.mu.Lock()
		r.m.acting[target] = true
		r.m.mu.Unlock()
	}
	r.Reporter.Step(target, s)
}

func (r metricsReporter) TargetDone(t runbook.TargetResult) {
	r.m.mu.Lock()
	delete(r.m.acting, t.Target)
	for _, s := range t.Steps {
		if s.Status == runbook.StepActed && s.Duration > 0 {
			r.m.stepSum[s.ID] += s.Duration.Seconds()
			r.m.stepCount[s.ID]++
		}
	}
	r.m.mu.Unlock()
	r.Reporter.TargetDone(t)
}

func (m *runMetrics) ended(o runbook.Outcome) {
	m.mu.Lock()
	m.outcome = o
	m.mu.Unlock()
}

// write prints every metric in the text exposition format.
func (m *runMetrics) write(w io.Writer) {
	var p RunProgress
	if pr := m.progress.Load(); pr != nil {
		p = pr.snapshot()
	}
	m.mu.Lock()
	acting, outcome := len(m.acting), m.outcome
	steps := make([]string, 0, len(m.stepSum))
	for id := range m.stepSum {
		steps = append(steps, id)
	}
	sort.Strings(steps)
	sums, counts := make([]float64, len(steps)), make([]int, len(steps))
	for i, id := range steps {
		sums[i], counts[i] = m.stepSum[id], m.stepCount[id]
	}
	m.mu.Unlock()

	gauge := func(name, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, strconv.FormatFloat(v, 'g', -1, 64))
	}
	fmt.Fprintf(w, "# HELP rollbook_run_info The run this process is; always 1.\n# TYPE rollbook_run_info gauge\n"+
		"rollbook_run_info{plugin=%q,run=%q} 1\n", m.plugin, m.run)
	gauge("rollbook_nodes_total", "Nodes the run covers; 0 while not known.", float64(p.Total))
	gauge("rollbook_nodes_done", "Nodes the run finished.", float64(p.Done))
	gauge("rollbook_nodes_stopped", "Nodes that stopped the run: blocked on a person, or failed.", float64(p.Failed))
	gauge("rollbook_nodes_in_progress", "Nodes a step acted on that have not finished.", float64(acting))
	if eta, ok := EstimateETA(p, nil); ok {
		gauge("rollbook_eta_seconds", "Time left at the mean duration of this run's nodes.", eta.Left.Seconds())
	}
	ended := 0.0
	if outcome != "" {
		ended = 1
	}
	gauge("rollbook_run_ended", "1 once the run ended (rollbook_run_outcome says how).", ended)
	if outcome != "" {
		fmt.Fprintf(w, "# HELP rollbook_run_outcome How the run ended; always 1.\n# TYPE rollbook_run_outcome gauge\n"+
			"rollbook_run_outcome{outcome=%q} 1\n", string(outcome))
	}
	if len(steps) > 0 {
		fmt.Fprintf(w, "# HELP rollbook_step_duration_seconds How long the steps that acted took, per step.\n"+
			"# TYPE rollbook_step_duration_seconds summary\n")
		for i, id := range steps {
			fmt.Fprintf(w, "rollbook_step_duration_seconds_sum{step=%q} %s\n", id, strconv.FormatFloat(sums[i], 'g', -1, 64))
			fmt.Fprintf(w, "rollbook_step_duration_seconds_count{step=%q} %d\n", id, counts[i])
		}
	}
}

func (m *runMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	m.write(&b)
	_, _ = io.WriteString(w, b.String())
}

// applyMetrics serves the run's metrics at addr ("" or "0": none) until the
// session ends; the listener is opened here, so an address in use stops
// the command before it acts.
func (s *Session) applyMetrics(o *runbook.Options, addr string) error {
	if addr == "" || addr == "0" || s.DryRun() {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	m := newRunMetrics(s.plugin, s.RunID)
	m.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Progress.Printf("warning: the metrics endpoint stopped: %v", err)
		}
	}()
	s.metrics, s.metricsServer = m, srv
	s.Progress.Printf("serving the run's metrics at http://%s/metrics", ln.Addr())
	if o.Reporter == nil {
		o.Reporter = s.Progress
	}
	o.Reporter = metricsReporter{o.Reporter, m}
	return nil
}

// closeMetrics stops serving; a scrape in flight gets a second to finish.
func (s *Session) closeMetrics() {
	if s.metricsServer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.metricsServer.Shutdown(ctx)
	s.metricsServer = nil
}
