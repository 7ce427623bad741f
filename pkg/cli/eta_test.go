package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func TestEstimateETA(t *testing.T) {
	s := time.Second
	for name, c := range map[string]struct {
		p       RunProgress
		earlier []time.Duration
		left    time.Duration
		basis   string
		ok      bool
	}{
		// 7 left, 2 at a time: 4 batches of the mean 80 s (a re-run's quick node counts).
		"this run, parallel": {RunProgress{Done: 3, Total: 10, Parallel: 2, NodeSeconds: []float64{0.5, 89.5, 150}}, nil, 320 * s, "this run", true},
		// Failed nodes are not left.
		"failed": {RunProgress{Done: 2, Failed: 1, Total: 5, NodeSeconds: []float64{40, 80}}, nil, 120 * s, "this run", true},
		// This run has measured nothing yet: the journal's earlier runs.
		"earlier runs":  {RunProgress{Total: 4, Parallel: 4}, []time.Duration{10 * s, 30 * s, 20 * s}, 20 * s, "earlier runs", true},
		"this run wins": {RunProgress{Done: 1, Total: 2, NodeSeconds: []float64{5}}, []time.Duration{time.Hour}, 5 * s, "this run", true},
		"nothing known": {RunProgress{Total: 4}, nil, 0, "", false},
		"no total":      {RunProgress{Done: 4, NodeSeconds: []float64{5}}, nil, 0, "", false},
		"all done":      {RunProgress{Done: 4, Total: 4, NodeSeconds: []float64{5}}, nil, 0, "this run", true},
	} {
		e, ok := EstimateETA(c.p, c.earlier)
		if ok != c.ok || e.Left != c.left || e.Basis != c.basis {
			t.Errorf("%s: got %v %q ok=%v, want %v %q ok=%v", name, e.Left, e.Basis, ok, c.left, c.basis, c.ok)
		}
	}
}

func TestJournalNodeDurations(t *testing.T) {
	at := func(sec int) time.Time { return time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC) }
	entries := []journal.Entry{
		{Run: "old", Object: "node/a", Reason: "Cordoned", Time: at(0)},
		{Run: "old", Object: "node/a", Reason: "Uncordoned", Time: at(90)},
		{Run: "old", Object: "node/b", Reason: "Cordoned", Time: at(100)}, // never finished: not a duration
		{Run: "old", Object: "lease/kube-system/rollbook-tt", Reason: "RunFinished", Time: at(200)},
		{Run: "now", Object: "node/c", Reason: "Cordoned", Time: at(300)},
		{Run: "now", Object: "node/c", Reason: "Uncordoned", Time: at(310)},
		{Run: "older", Object: "node/d", Reason: "Cordoned", Time: at(1)},
		{Run: "older", Object: "node/d", Reason: "Labeled", Time: at(20)},
		{Run: "older", Object: "node/d", Reason: "Uncordoned", Time: at(31)},
	}
	got := JournalNodeDurations(entries, "now")
	want := []time.Duration{30 * time.Second, 90 * time.Second} // by when each ended
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A node already done measures nothing; one that acted measures its steps.
func TestWorkedFor(t *testing.T) {
	done := runbook.TargetResult{Steps: []runbook.StepResult{{Status: runbook.StepDone, Duration: time.Minute}}}
	if d := workedFor(done); d != 0 {
		t.Fatalf("an already-done node measured %v", d)
	}
	acted := runbook.TargetResult{Steps: []runbook.StepResult{{Status: runbook.StepActed, Duration: 2 * time.Second},
		{Status: runbook.StepDone, Duration: time.Hour}, {Status: runbook.StepActed, Duration: 3 * time.Second}}}
	if d := workedFor(acted); d != 5*time.Second {
		t.Fatalf("acted steps measured %v, want 5s", d)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{10 * time.Second: "10s", 90 * time.Second: "1m30s", 2 * time.Minute: "2m",
		41*time.Minute + 20*time.Second: "41m", 2 * time.Hour: "2h", 150 * time.Minute: "2h30m"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// The run's own tally: k of N, an ETA once a node was measured, a rate.
func TestTally(t *testing.T) {
	r := &progressReporter{started: time.Now().Add(-time.Hour), p: RunProgress{Total: 6, Parallel: 1}}
	if got := r.Tally(); got != "0 of 6 done" {
		t.Errorf("before any node: %q", got)
	}
	r.p.Done, r.p.NodeSeconds = 2, []float64{600, 600}
	if got := r.Tally(); !strings.HasPrefix(got, "2 of 6 done · ETA 40m · 2.0 nodes/h") {
		t.Errorf("after two nodes: %q", got)
	}
}
