package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// AnnProgress is the Lease annotation where a run publishes its progress
// (RunProgress, JSON) with its renewals, for status and its ETA.
const AnnProgress = "rollbook.dev/progress"

// RunProgress is how far the run holding the Lease is.
type RunProgress struct {
	Run      string `json:"run"`
	Done     int    `json:"done"`
	Failed   int    `json:"failed,omitempty"`
	Total    int    `json:"total,omitempty"` // 0: not known up front
	Parallel int    `json:"parallel,omitempty"`
	// NodeSeconds are the measured durations of this run's nodes that did
	// work (first step started to last step done), the last keptDurations.
	NodeSeconds []float64 `json:"nodeSeconds,omitempty"`
	// Outcome is how the run ended (a runbook.Outcome); "" while it runs.
	// status --wait exits by it.
	Outcome runbook.Outcome `json:"outcome,omitempty"`
}

// keptDurations bounds the durations a run publishes: the mean of the
// last 50 nodes follows a fleet's drift and keeps the annotation small.
const keptDurations = 50

// progressReporter counts the targets a run finishes and publishes the
// count and each worked node's duration on the Lease's next renewal.
type progressReporter struct {
	runbook.Reporter
	lock    *lease.Lock // nil for a dry run: nothing is published
	started time.Time
	mu      sync.Mutex
	p       RunProgress
}

// snapshot is the progress as it is now. NodeSeconds is only appended
// to and resliced, so the copy's elements never change under its reader.
func (r *progressReporter) snapshot() RunProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p
}

// Tally is how far the run is, as its own output says it: "2 of 6 done,
// 1 failed · ETA 41m · 5.9 nodes/h" (the ETA once a node was measured, the
// rate once one finished).
func (r *progressReporter) Tally() string {
	p := r.snapshot()
	s := fmt.Sprintf("%d done", p.Done)
	if p.Total > 0 {
		s = fmt.Sprintf("%d of %d done", p.Done, p.Total)
	}
	if p.Failed > 0 {
		s += fmt.Sprintf(", %d stopped", p.Failed)
	}
	if eta, ok := EstimateETA(p, nil); ok && eta.Left > 0 {
		s += " · ETA " + shortDuration(eta.Left)
	}
	if el := time.Since(r.started); p.Done > 0 && el > 0 {
		rate := float64(p.Done) / el.Hours()
		if rate >= 100 {
			s += fmt.Sprintf(" · %.0f nodes/h", rate)
		} else {
			s += fmt.Sprintf(" · %.1f nodes/h", rate)
		}
	}
	return s
}

// shortDuration is d to the second below ten minutes, to the minute above.
func shortDuration(d time.Duration) string {
	if d >= 10*time.Minute {
		d = d.Round(time.Minute)
	} else {
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (r *progressReporter) TargetDone(t runbook.TargetResult) {
	r.mu.Lock()
	switch t.Outcome {
	case runbook.OutcomeDone:
		r.p.Done++
		if d := workedFor(t); d > 0 {
			r.p.NodeSeconds = append(r.p.NodeSeconds, d.Seconds())
			if len(r.p.NodeSeconds) > keptDurations {
				r.p.NodeSeconds = r.p.NodeSeconds[len(r.p.NodeSeconds)-keptDurations:]
			}
		}
	case runbook.OutcomeFailed, runbook.OutcomeBlocked:
		r.p.Failed++
	}
	r.mu.Unlock()
	r.publish()
	r.Reporter.TargetDone(t)
}

// end records how the run ended and publishes it with the lock's release.
func (r *progressReporter) end(o runbook.Outcome) {
	r.mu.Lock()
	r.p.Outcome = o
	r.mu.Unlock()
	r.publish()
}

func (r *progressReporter) publish() {
	if r.lock == nil {
		return
	}
	r.mu.Lock()
	b, _ := json.Marshal(r.p) // a struct of numbers always encodes
	r.mu.Unlock()
	r.lock.Publish(AnnProgress, string(b))
}

// workedFor is how long a target's steps that acted took, from the first
// one's start: 0 for a node that was already done (nothing to measure).
func workedFor(t runbook.TargetResult) time.Duration {
	var first *time.Time
	var sum time.Duration
	acted := false
	for _, s := range t.Steps {
		if s.Status != runbook.StepActed {
			continue
		}
		acted = true
		sum += s.Duration
		if s.Started != nil && (first == nil || s.Started.Before(*first)) {
			first = s.Started
		}
	}
	if !acted {
		return 0
	}
	if first != nil {
		if wall := time.Since(*first); wall > sum {
			return wall // waits between steps (a drain, a soak) count too
		}
	}
	return sum
}

// ETA is status's estimate of a run's time left.
type ETA struct {
	Left    time.Duration
	PerNode time.Duration
	// Basis says where PerNode comes from: this run, or earlier runs.
	Basis string
	Nodes int // how many durations it rests on
}

// EstimateETA is the time left of a run with p's progress: the nodes left,
// in batches of its parallelism, each taking the mean of this run's
// measured node durations, or of earlier (earlier runs') when this run has
// none yet. The mean, not the median: the total left is what is asked, and
// a re-run's quick nodes (already at the version: a probe, a label) and its
// slow ones both count for what they cost. ok is false when nothing is
// known to estimate from.
func EstimateETA(p RunProgress, earlier []time.Duration) (ETA, bool) {
	if p.Total <= 0 {
		return ETA{}, false
	}
	left := p.Total - p.Done - p.Failed
	if left <= 0 {
		return ETA{Basis: "this run"}, true
	}
	e := ETA{Basis: "this run", Nodes: len(p.NodeSeconds)}
	var ds []time.Duration
	for _, s := range p.NodeSeconds {
		ds = append(ds, time.Duration(s*float64(time.Second)))
	}
	if len(ds) == 0 {
		ds, e.Basis, e.Nodes = earlier, "earlier runs", len(earlier)
	}
	if len(ds) == 0 {
		return ETA{}, false
	}
	e.PerNode = mean(ds)
	par := max(p.Parallel, 1)
	batches := (left + par - 1) / par
	e.Left = time.Duration(batches) * e.PerNode
	return e, true
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// JournalNodeDurations are the per-node durations of the runs in entries
// other than skipRun: a node's first to last entry of a run, for nodes
// that run uncordoned (finished), newest runs' last, at most keptDurations.
func JournalNodeDurations(entries []journal.Entry, skipRun string) []time.Duration {
	type span struct {
		first, last time.Time
		done        bool
	}
	spans := map[[2]string]*span{}
	var order [][2]string
	for _, e := range entries {
		if e.Run == skipRun || !strings.HasPrefix(e.Object, "node/") {
			continue
		}
		k := [2]string{e.Run, e.Object}
		sp := spans[k]
		if sp == nil {
			sp = &span{first: e.Time}
			spans[k] = sp
			order = append(order, k)
		}
		if e.Time.After(sp.last) {
			sp.last = e.Time
		}
		if e.Reason == "Uncordoned" {
			sp.done = true
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return spans[order[i]].last.Before(spans[order[j]].last) })
	var out []time.Duration
	for _, k := range order {
		if sp := spans[k]; sp.done && sp.last.After(sp.first) {
			out = append(out, sp.last.Sub(sp.first))
		}
	}
	if len(out) > keptDurations {
		out = out[len(out)-keptDurations:]
	}
	return out
}

// RunNote is what status prints under its table about the roll of the
// Lease ns/name, read at once: its pause, who holds it, and the holder's
// progress with the time left (from the journal's earlier runs while
// this run has measured no node yet); "" when no run holds it and no pause.
func RunNote(ctx context.Context, cs kubernetes.Interface, plugin, ns, name string) string {
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return runNote(ctx, cs, plugin, ns, l)
}

// RunNoteOf is RunNote from a Lease already read (a watch's): it reads
// nothing more, so the ETA rests on this run's measured nodes alone.
func RunNoteOf(l *coordv1.Lease, plugin string) string {
	if l == nil {
		return ""
	}
	return runNote(context.Background(), nil, plugin, l.Namespace, l)
}

func runNote(ctx context.Context, cs kubernetes.Interface, plugin, ns string, l *coordv1.Lease) string {
	var lines []string
	if p := lease.PauseOf(l); p != nil {
		lines = append(lines, fmt.Sprintf("PAUSED: %s — `kubectl %s resume` lifts it", p, plugin))
	}
	held := lease.RecordOf(l)
	var p RunProgress
	if v := l.Annotations[AnnProgress]; v != "" {
		_ = json.Unmarshal([]byte(v), &p) // an unreadable record shows no progress
	}
	var run string
	switch h := held.Holder; {
	case held.Identity != "":
		run = fmt.Sprintf("RUN %s: held by %s on %s", h.RunID, h.User, h.Host)
		if p.Run != h.RunID {
			p = RunProgress{}
		}
	case p.Run != "" && p.Done+p.Failed < p.Total:
		// A stopped run's progress stays on the Lease: re-running its command continues it.
		run = fmt.Sprintf("LAST RUN %s stopped", p.Run)
	default:
		return strings.Join(lines, "\n")
	}
	if p.Run != "" {
		run += fmt.Sprintf("; %d done", p.Done)
		if p.Total > 0 {
			run += fmt.Sprintf(" of %d", p.Total)
		}
		if p.Failed > 0 {
			run += fmt.Sprintf(", %d failed", p.Failed)
		}
		var earlier []time.Duration
		if len(p.NodeSeconds) == 0 && p.Total > 0 && cs != nil {
			// Only until this run has measured a node: the journal is a larger read.
			if entries, _, err := journal.Read(ctx, cs, ns, journal.Name(plugin)); err == nil {
				earlier = JournalNodeDurations(entries, p.Run)
			}
		}
		if eta, ok := EstimateETA(p, earlier); ok {
			run += "; " + eta.String()
		} else if p.Total > 0 {
			run += "; ETA unknown until a node finishes (no earlier run in the journal)"
		}
	}
	return strings.Join(append(lines, run), "\n")
}

// String is the ETA as status prints it.
func (e ETA) String() string {
	if e.Left == 0 {
		return "ETA: nothing left"
	}
	return fmt.Sprintf("ETA %s (mean %s per node over %d node(s) of %s)", e.Left.Round(time.Second),
		e.PerNode.Round(time.Second), e.Nodes, e.Basis)
}
