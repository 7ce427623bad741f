package runbook

import (
	"context"
	"slices"
	"sync"
	"testing"
)

func TestLocateSaysWhereATargetStands(t *testing.T) {
	rb := testRunbook(newWorld("n0"), "v2", newCounters(), nil)
	node := func(cordon string, labels map[string]string) facts {
		n := memNode{labels: labels, annotations: map[string]string{}, cordonedBy: cordon}
		if n.labels == nil {
			n.labels = map[string]string{}
		}
		return facts{name: "n0", node: n, target: "v2"}
	}
	for _, tc := range []struct {
		name  string
		f     facts
		step  string
		stage Stage
		guard string
		done  int
	}{
		{"untouched", node("", nil), "test.cordon", StageUntouched, "", 0},
		{"a foreign cordon blocks the first step", node("someone", nil), "test.cordon", StageUntouched, "no foreign cordon: the node was cordoned by someone else", 0},
		{"cordoned: half-way", node(owner, nil), "test.prepare", StageHalfway, "", 1},
		{"prepared: half-way", node(owner, map[string]string{prepLabel: "v2"}), "test.upgrade", StageHalfway, "", 2},
		{"upgraded, still cordoned", node(owner, map[string]string{testLabel: "v2"}), "test.uncordon", StageHalfway, "", 3},
		{"done", node("", map[string]string{testLabel: "v2"}), "", StageDone, "", 4},
		{"upgraded but prepared for another version: the commit point counts it", node("", map[string]string{testLabel: "v2", prepLabel: "v1"}), "", StageDone, "", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Locate(rb, tc.f)
			if p.StepID != tc.step || p.Stage != tc.stage || p.Guard != tc.guard || len(p.DoneEvidence) != tc.done {
				t.Errorf("Locate = %+v; want step %q, stage %s, guard %q, %d done", p, tc.step, tc.stage, tc.guard, tc.done)
			}
			if p.Stage == StageDone && p.Step != len(rb.Steps) || p.Stage != StageDone && rb.Steps[p.Step].ID != p.StepID {
				t.Errorf("index %d does not match step %q", p.Step, p.StepID)
			}
		})
	}
}

// A step whose Done reads parts the facts were not read for ends the
// location there: the engine observes again rather than decide on parts
// carried over from an older observation.
func TestLocateStopsAtAStepThatReadsUnobservedParts(t *testing.T) {
	const partA, partB Parts = 1, 2
	rb := &Runbook[int]{Steps: []Step[int]{
		{ID: "a", Reads: partA, Done: func(int) (bool, string) { return true, "a done" }},
		{ID: "b", Reads: partB, Done: func(int) (bool, string) { return true, "b done" }},
		{ID: "c", Reads: partA, Done: func(int) (bool, string) { return false, "c not done" }},
	}}
	p, complete := locate(rb, 0, 0, partA, true)
	if complete || p.StepID != "b" || len(p.DoneEvidence) != 1 {
		t.Fatalf("locate on part A only = %+v, complete %v; want it to stop at b after 1 done step", p, complete)
	}
	p, complete = locate(rb, 0, p.Step, AllParts, true)
	if !complete || p.StepID != "c" || !slices.Equal(p.DoneEvidence, []string{"b done"}) || p.Stage != StageHalfway {
		t.Fatalf("locate from b = %+v, complete %v; want c, half-way, after b", p, complete)
	}
}

// The engine and Locate agree: a run interrupted after any step leaves the
// target where Locate says, and the next run starts at that step.
func TestEngineStartsWhereLocateSays(t *testing.T) {
	for _, stopAfter := range []string{"test.cordon", "test.prepare", "test.upgrade"} {
		t.Run(stopAfter, func(t *testing.T) {
			w := newWorld("n1")
			ctx, cancel := context.WithCancel(context.Background())
			rb := testRunbook(w, "v3", newCounters(), func(id string) {
				if id == stopAfter {
					cancel()
				}
			})
			Run(ctx, rb, targets(w, "n1"), Options{})
			f, _ := rb.Observe(context.Background(), memTarget{w: w, name: "n1"})
			p := Locate(rb, f)
			res := Run(context.Background(), rb, targets(w, "n1"), Options{DryRun: true})
			if got := res.Targets[0].State; got != p.StepID || p.Stage != StageHalfway {
				t.Errorf("after %s: Locate says %s (%s), the engine would start at %s", stopAfter, p.StepID, p.Stage, got)
			}
		})
	}
}

// doneCounter counts the targets that ended.
type doneCounter struct {
	nopReporter
	mu    sync.Mutex
	ended int
}

func (d *doneCounter) TargetDone(TargetResult) { d.mu.Lock(); d.ended++; d.mu.Unlock() }
func (d *doneCounter) count() int              { d.mu.Lock(); defer d.mu.Unlock(); return d.ended }

// A lazy source is asked for the next target only once that target may
// start: after the one before ended (one slot), and never after a pause.
func TestSourceIsAskedForATargetOnlyWhenItMayStart(t *testing.T) {
	w := newWorld(allNodes...)
	rep := &doneCounter{}
	var endedWhenAsked []int
	src := func(yield func(Target) bool) {
		for _, n := range allNodes {
			endedWhenAsked = append(endedWhenAsked, rep.count())
			if !yield(memTarget{w: w, name: n}) {
				return
			}
		}
	}
	res := RunSource(context.Background(), testRunbook(w, "v2", newCounters(), nil), src, Options{Reporter: rep})
	if res.Outcome != OutcomeDone || len(res.Targets) != 3 || !slices.Equal(endedWhenAsked, []int{0, 1, 2}) {
		t.Fatalf("outcome %s, %d targets; targets ended when each was asked for: %v, want [0 1 2]", res.Outcome,
			len(res.Targets), endedWhenAsked)
	}

	endedWhenAsked = nil
	w = newWorld(allNodes...)
	asks := 0
	paused := func(context.Context) (bool, string) { asks++; return asks > 1, "paused by a test" }
	res = RunSource(context.Background(), testRunbook(w, "v2", newCounters(), nil), src, Options{Reporter: rep, Paused: paused})
	if res.Outcome != OutcomePaused || res.Stopped != "paused by a test" || len(endedWhenAsked) != 2 {
		t.Fatalf("paused after the first target: outcome %s, stopped %q, source asked %d times (want paused, the "+
			"reason, 2)", res.Outcome, res.Stopped, len(endedWhenAsked))
	}
	if got := res.Targets[1]; got.Outcome != OutcomePaused || got.State != "not started" {
		t.Errorf("the target asked for while paused: %+v, want paused, not started", got)
	}
}
