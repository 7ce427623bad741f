package runbook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The engine is tested on an in-memory world: targets are fake nodes whose
// labels, annotations and cordon live in a map. Real API behaviour is tested
// by the plugins' e2e tests on the simulated cluster.

type memNode struct {
	labels, annotations map[string]string
	cordonedBy          string // "" = not cordoned; "someone" = a foreign cordon
}

type world struct {
	mu    sync.Mutex
	nodes map[string]*memNode
}

func newWorld(names ...string) *world {
	w := &world{nodes: map[string]*memNode{}}
	for _, n := range names {
		w.nodes[n] = &memNode{labels: map[string]string{}, annotations: map[string]string{}}
	}
	return w
}

func (w *world) snapshot(name string) memNode {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.nodes[name]
	c := memNode{labels: map[string]string{}, annotations: map[string]string{}, cordonedBy: n.cordonedBy}
	for k, v := range n.labels {
		c.labels[k] = v
	}
	for k, v := range n.annotations {
		c.annotations[k] = v
	}
	return c
}

func (w *world) update(name string, f func(n *memNode)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w.nodes[name])
}

// memTarget is a Target over one node of a world.
type memTarget struct {
	w    *world
	name string
}

func (t memTarget) Name() string { return "node/" + t.name }
func (t memTarget) Ref() corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Node", Name: t.name}
}
func (t memTarget) Annotation(_ context.Context, key string) (string, bool, error) {
	v, ok := t.w.snapshot(t.name).annotations[key]
	return v, ok, nil
}
func (t memTarget) SetAnnotation(_ context.Context, key string, value *string) error {
	t.w.update(t.name, func(n *memNode) {
		if value == nil {
			delete(n.annotations, key)
		} else {
			n.annotations[key] = *value
		}
	})
	return nil
}

func targets(w *world, names ...string) []Target {
	var ts []Target
	for _, n := range names {
		ts = append(ts, memTarget{w: w, name: n})
	}
	return ts
}

type facts struct {
	name   string
	node   memNode
	target string
}

const (
	testLabel = "rollbook-test.dev/version"
	prepLabel = "rollbook-test.dev/prepared"
	owner     = "test-roll"
)

type counters struct {
	mu   sync.Mutex
	acts map[string]int
}

func newCounters() *counters { return &counters{acts: map[string]int{}} }

func (c *counters) inc(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acts[id]++
}

func (c *counters) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acts[id]
}

// testRunbook is shaped like the real ones: cordon, two label changes,
// uncordon; Done is derived from the node alone. afterAct runs after each
// successful Act (tests use it to interrupt the run at an exact point).
func testRunbook(w *world, version string, cnt *counters, afterAct func(stepID string)) *Runbook[facts] {
	finished := func(f facts) bool { return f.node.labels[testLabel] == f.target }
	ours := func(f facts) bool { return f.node.cordonedBy == owner }
	act := func(id string, change func(n *memNode)) func(ctx context.Context, f facts) error {
		return func(ctx context.Context, f facts) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			w.update(f.name, change)
			cnt.inc(id)
			if afterAct != nil {
				afterAct(id)
			}
			return nil
		}
	}
	return &Runbook[facts]{
		Name: owner, Title: "Test roll", Doc: "A runbook used to test the engine.",
		Observe: func(_ context.Context, t Target) (facts, error) {
			name := strings.TrimPrefix(t.Name(), "node/")
			return facts{name: name, node: w.snapshot(name), target: version}, nil
		},
		Annotation: func(f facts, key string) (string, bool) { v, ok := f.node.annotations[key]; return v, ok },
		Notes: func(f facts) []string {
			if ours(f) {
				return []string{"node is cordoned by rollbook test-roll; re-run to continue"}
			}
			return nil
		},
		Steps: []Step[facts]{
			{
				ID: "test.cordon", Title: "Cordon", Doc: "Cordon the node.",
				Done: func(f facts) (bool, string) { return ours(f) || finished(f), "cordoned by " + f.node.cordonedBy },
				Guards: []Guard[facts]{{Name: "no foreign cordon", Check: func(f facts) (bool, string) {
					return f.node.cordonedBy == "" || ours(f), "the node was cordoned by someone else"
				}}},
				Plan: func(f facts) []Change { return []Change{{Object: "node/" + f.name, Action: "cordon"}} },
				Act:  act("test.cordon", func(n *memNode) { n.cordonedBy = owner }),
			},
			{
				ID: "test.prepare", Title: "Prepare", Doc: "Mark the node prepared.",
				Done: func(f facts) (bool, string) {
					return f.node.labels[prepLabel] == f.target || finished(f), "prepared=" + f.node.labels[prepLabel]
				},
				Act:     act("test.prepare", func(n *memNode) { n.labels[prepLabel] = version }),
				Timeout: time.Minute,
			},
			{
				ID: "test.upgrade", Title: "Upgrade", Doc: "Label the node with the new version.",
				Done: func(f facts) (bool, string) { return finished(f), "version=" + f.node.labels[testLabel] },
				Guards: []Guard[facts]{{Name: "node cordoned by this runbook", Check: func(f facts) (bool, string) {
					return ours(f), "the node is not cordoned by test-roll"
				}}},
				Act: act("test.upgrade", func(n *memNode) { n.labels[testLabel] = version }),
			},
			{
				ID: "test.uncordon", Title: "Uncordon", Doc: "Uncordon the node.",
				Done: func(f facts) (bool, string) { return finished(f) && !ours(f), "cordoned by " + f.node.cordonedBy },
				Act:  act("test.uncordon", func(n *memNode) { n.cordonedBy = "" }),
			},
		},
	}
}

var allNodes = []string{"n0", "n1", "n2"}

func TestRunCompletesAndIsIdempotent(t *testing.T) {
	w := newWorld(allNodes...)
	cnt := newCounters()
	rb := testRunbook(w, "v2", cnt, nil)
	res := Run(context.Background(), rb, targets(w, allNodes...), Options{RunID: "r1"})
	if res.Outcome != OutcomeDone {
		t.Fatalf("outcome %s: %+v", res.Outcome, res)
	}
	for _, s := range rb.Steps {
		if got := cnt.get(s.ID); got != 3 {
			t.Errorf("step %s acted %d times for 3 nodes", s.ID, got)
		}
	}
	for _, n := range allNodes {
		node := w.snapshot(n)
		if node.labels[testLabel] != "v2" || node.cordonedBy != "" || node.annotations[TimerKey(owner)] != "" {
			t.Errorf("%s not finished cleanly: %+v", n, node)
		}
	}
	res = Run(context.Background(), rb, targets(w, allNodes...), Options{RunID: "r2"})
	if res.Outcome != OutcomeDone {
		t.Fatalf("re-run outcome %s", res.Outcome)
	}
	for _, tr := range res.Targets {
		for _, s := range tr.Steps {
			if s.Status != StepDone {
				t.Errorf("re-run: %s %s is %s, want done", tr.Target, s.ID, s.Status)
			}
		}
	}
	for _, s := range rb.Steps {
		if got := cnt.get(s.ID); got != 3 {
			t.Errorf("re-run repeated step %s (%d acts)", s.ID, got)
		}
	}
}

// Interrupt the run right after each step's action, then re-run: the roll
// completes and no action is ever repeated.
func TestResumeAfterInterruptAtEveryStep(t *testing.T) {
	for _, stop := range testRunbook(newWorld(), "v3", newCounters(), nil).Steps {
		t.Run(stop.ID, func(t *testing.T) {
			w := newWorld("n1")
			cnt := newCounters()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rb := testRunbook(w, "v3", cnt, func(id string) {
				if id == stop.ID {
					cancel()
				}
			})
			res := Run(ctx, rb, targets(w, "n1"), Options{RunID: "first"})
			if res.Outcome != OutcomeInterrupted && stop.ID != "test.uncordon" {
				t.Fatalf("first run: outcome %s, want interrupted", res.Outcome)
			}
			rb2 := testRunbook(w, "v3", cnt, nil)
			res = Run(context.Background(), rb2, targets(w, "n1"), Options{RunID: "second"})
			if res.Outcome != OutcomeDone {
				t.Fatalf("resumed run: outcome %s %+v", res.Outcome, res.Targets)
			}
			for _, s := range rb2.Steps {
				if got := cnt.get(s.ID); got != 1 {
					t.Errorf("step %s acted %d times across the interrupted and the resumed run; want exactly once", s.ID, got)
				}
			}
			if v := w.snapshot("n1").annotations[TimerKey(owner)]; v != "" {
				t.Errorf("a step clock outlived the roll: %q", v)
			}
		})
	}
}

func TestGuardBlocksAndNotesExplain(t *testing.T) {
	w := newWorld("n2")
	w.update("n2", func(n *memNode) { n.cordonedBy = "someone" })
	cnt := newCounters()
	res := Run(context.Background(), testRunbook(w, "v4", cnt, nil), targets(w, "n2"), Options{})
	if res.Outcome != OutcomeBlocked || res.Targets[0].State != "test.cordon" {
		t.Fatalf("want blocked at test.cordon, got %s at %s", res.Outcome, res.Targets[0].State)
	}
	if s := res.Targets[0].Steps[0]; !strings.Contains(s.Error, "cordoned by someone else") {
		t.Fatalf("blocked step does not say why: %+v", s)
	}
	if len(cnt.acts) != 0 {
		t.Fatalf("a blocked run acted: %v", cnt.acts)
	}
}

func TestHaltAfterFailureSkipsRemainingTargets(t *testing.T) {
	w := newWorld(allNodes...)
	rb := testRunbook(w, "v5", newCounters(), nil)
	rb.Steps[1].Act = func(context.Context, facts) error { return errors.New("helper failed") }
	res := Run(context.Background(), rb, targets(w, allNodes...), Options{})
	if res.Outcome != OutcomeFailed {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if res.Targets[0].Outcome != OutcomeFailed || res.Targets[1].Outcome != OutcomeSkipped || res.Targets[2].Outcome != OutcomeSkipped {
		t.Fatalf("want first failed, rest skipped: %+v", res.Targets)
	}
	if len(res.Targets[0].Notes) == 0 {
		t.Fatal("a failed node left cordoned must say so in its notes")
	}
}

func TestKeepGoingRunsEveryTarget(t *testing.T) {
	w := newWorld(allNodes...)
	rb := testRunbook(w, "v5", newCounters(), nil)
	act := rb.Steps[1].Act
	rb.Steps[1].Act = func(ctx context.Context, f facts) error {
		if f.name == "n0" {
			return Blocked(errors.New("a PDB allows no eviction"))
		}
		return act(ctx, f)
	}
	res := Run(context.Background(), rb, targets(w, allNodes...), Options{KeepGoing: true})
	if res.Outcome != OutcomeBlocked || res.Targets[0].Outcome != OutcomeBlocked ||
		res.Targets[1].Outcome != OutcomeDone || res.Targets[2].Outcome != OutcomeDone {
		t.Fatalf("keep going: %s %+v", res.Outcome, res.Targets)
	}
}

func TestPausedRollFinishesTheTargetInFlightAndStartsNoOther(t *testing.T) {
	w := newWorld(allNodes...)
	paused := false
	rb := testRunbook(w, "v8", newCounters(), func(id string) {
		if id == "test.prepare" {
			paused = true // `pause` arrives while the first node is in flight
		}
	})
	res := Run(context.Background(), rb, targets(w, allNodes...), Options{
		Paused: func(context.Context) (bool, string) { return paused, "paused by alice" },
	})
	if res.Outcome != OutcomePaused {
		t.Fatalf("outcome %s, want paused: %+v", res.Outcome, res.Targets)
	}
	if res.Targets[0].Outcome != OutcomeDone || res.Targets[1].Outcome != OutcomePaused || res.Targets[2].Outcome != OutcomePaused {
		t.Fatalf("want the first node finished and the rest not started: %+v", res.Targets)
	}
	if w.snapshot("n1").cordonedBy != "" || w.snapshot("n0").labels[testLabel] != "v8" {
		t.Fatal("a paused roll touched a node it should not have, or left the one in flight unfinished")
	}
	if !strings.Contains(res.Targets[1].Error, "alice") {
		t.Fatalf("paused targets must say why: %+v", res.Targets[1])
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	w := newWorld(allNodes...)
	want := fmt.Sprint(w.snapshot("n0"), w.snapshot("n1"), w.snapshot("n2"))
	cnt := newCounters()
	res := Run(context.Background(), testRunbook(w, "v6", cnt, nil), targets(w, allNodes...), Options{DryRun: true})
	if res.Outcome != OutcomePlanned {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if got := fmt.Sprint(w.snapshot("n0"), w.snapshot("n1"), w.snapshot("n2")); got != want {
		t.Fatalf("dry run changed nodes:\nbefore %s\nafter  %s", want, got)
	}
	if len(cnt.acts) != 0 {
		t.Fatalf("dry run acted: %v", cnt.acts)
	}
	first := res.Targets[0].Steps
	if first[0].Status != StepWouldAct || first[1].Status != StepPending || len(first[0].Changes) != 1 {
		t.Fatalf("plan: %+v", first)
	}
}

func TestStepBudgetSurvivesRestart(t *testing.T) {
	w := newWorld("n0")
	target := memTarget{w: w, name: "n0"}
	ctx := context.Background()
	earlier := time.Now().Add(-50 * time.Second).UTC()
	v := "test.prepare@" + earlier.Format(time.RFC3339)
	if err := target.SetAnnotation(ctx, TimerKey(owner), &v); err != nil {
		t.Fatal(err)
	}
	started, stored, err := resumeClock(ctx, target.Annotation, owner, "test.prepare", time.Now())
	if err != nil || !stored || !started.Equal(earlier.Truncate(time.Second)) {
		t.Fatalf("clock restarted: got %v (stored %v), want %v (%v)", started, stored, earlier, err)
	}
	if id, at, ok := StepClock(w.snapshot("n0").annotations, owner); !ok || id != "test.prepare" || !at.Equal(earlier.Truncate(time.Second)) {
		t.Fatalf("StepClock: %q %v %v", id, at, ok)
	}
	now := time.Now()
	started, stored, err = resumeClock(ctx, target.Annotation, owner, "test.upgrade", now)
	if err != nil || stored || started.Before(now.Add(-time.Second)) {
		t.Fatalf("new step reused an old clock: %v %v %v", started, stored, err)
	}
	// A step whose stored budget is already spent fails with the budget named.
	spent := "test.prepare@" + time.Now().Add(-2*time.Minute).UTC().Format(time.RFC3339)
	if err := target.SetAnnotation(ctx, TimerKey(owner), &spent); err != nil {
		t.Fatal(err)
	}
	w.update("n0", func(n *memNode) { n.cordonedBy = owner })
	rb := testRunbook(w, "v7", newCounters(), nil)
	rb.Steps[1].Wait = func(ctx context.Context, _ facts) error { <-ctx.Done(); return ctx.Err() }
	res := Run(ctx, rb, []Target{target}, Options{})
	step := res.Targets[0].Steps[1]
	if res.Outcome != OutcomeFailed || !strings.Contains(step.Error, "budget") {
		t.Fatalf("want a failed step naming its spent budget, got %s: %+v", res.Outcome, step)
	}
}

// A clock left by an interrupted run whose step is done now (the run died
// after the act, or a person finished it) is cleared, so it can never bill a
// later run of that step with "ran out of budget".
func TestClockOfAStepSeenDoneIsCleared(t *testing.T) {
	w := newWorld("n0")
	stale := "test.prepare@" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	w.update("n0", func(n *memNode) {
		n.cordonedBy = owner
		n.labels[prepLabel] = "v9"
		n.annotations[TimerKey(owner)] = stale
	})
	res := Run(context.Background(), testRunbook(w, "v9", newCounters(), nil), targets(w, "n0"), Options{})
	if res.Outcome != OutcomeDone {
		t.Fatalf("outcome %s: %+v", res.Outcome, res.Targets)
	}
	if v, ok := w.snapshot("n0").annotations[TimerKey(owner)]; ok {
		t.Fatalf("stale clock kept: %q", v)
	}
}

// A timed step that ends within the clock delay writes no clock at all; one
// that runs longer carries its clock while it runs (so a re-run keeps the
// budget) and clears it when it ends.
func TestClockIsWrittenOnlyForAStepThatRunsLong(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		wantSeen bool
	}{{"quick", 0, false}, {"long", 300 * time.Millisecond, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld("n0")
				w.update("n0", func(n *memNode) { n.cordonedBy = owner })
				rb := testRunbook(w, "v5", newCounters(), nil)
				seen := ""
				rb.Steps[1].Wait = func(ctx context.Context, _ facts) error {
					time.Sleep(tc.wait)
					seen = w.snapshot("n0").annotations[TimerKey(owner)]
					return nil
				}
				res := Run(context.Background(), rb, targets(w, "n0"), Options{ClockDelay: 100 * time.Millisecond})
				if res.Outcome != OutcomeDone {
					t.Fatalf("outcome %s: %+v", res.Outcome, res.Targets)
				}
				if got := strings.HasPrefix(seen, rb.Steps[1].ID+"@"); got != tc.wantSeen {
					t.Fatalf("clock seen while the step ran = %q, want a clock: %v", seen, tc.wantSeen)
				}
				if v, ok := w.snapshot("n0").annotations[TimerKey(owner)]; ok {
					t.Fatalf("clock outlived its step: %q", v)
				}
			})
		})
	}
}

func TestMergeKeepsEveryTargetAndTheWorstOutcome(t *testing.T) {
	a := Result{RunID: "r", Outcome: OutcomeDone, Targets: []TargetResult{{Target: "x", Outcome: OutcomeDone}}}
	b := Result{RunID: "r", Outcome: OutcomeBlocked, Targets: []TargetResult{{Target: "y", Outcome: OutcomeBlocked}}}
	m := Merge("rollback", a, b)
	if m.Outcome != OutcomeBlocked || len(m.Targets) != 2 || m.RunID != "r" || m.Runbook != "rollback" {
		t.Fatalf("merge: %+v", m)
	}
	if Worst(OutcomePaused, OutcomeDone) != OutcomePaused || Worst(OutcomeFailed, OutcomeBlocked) != OutcomeFailed {
		t.Fatal("severity order")
	}
}

func TestMarkdownListsEveryStep(t *testing.T) {
	rb := testRunbook(newWorld(), "v", newCounters(), nil)
	md := rb.Markdown()
	for _, s := range rb.Steps {
		if !strings.Contains(md, "`"+s.ID+"`") || !strings.Contains(md, s.Doc) {
			t.Errorf("markdown lacks step %s", s.ID)
		}
	}
	if !strings.Contains(md, "- no foreign cordon") {
		t.Error("markdown lacks guards")
	}
}

// A node that fails while cordoned keeps its place in the parallel limit,
// even when the run keeps going: failures never put more nodes out of
// service than --max-parallel.
func TestStoppedTargetOutOfServiceKeepsItsSlot(t *testing.T) {
	w := newWorld(allNodes...)
	rb := testRunbook(w, "v10", newCounters(), nil)
	rb.OutOfService = func(f facts) bool { return f.node.cordonedBy == owner }
	act := rb.Steps[1].Act
	rb.Steps[1].Act = func(ctx context.Context, f facts) error {
		if f.name == "n0" {
			return errors.New("flash failed")
		}
		return act(ctx, f)
	}
	res := Run(context.Background(), rb, targets(w, allNodes...), Options{KeepGoing: true, Parallel: 1})
	if res.Targets[0].Outcome != OutcomeFailed || res.Targets[1].Outcome != OutcomeSkipped || res.Targets[2].Outcome != OutcomeSkipped {
		t.Fatalf("want n0 failed holding the only slot and the rest not started: %+v", res.Targets)
	}
	if !strings.Contains(res.Targets[1].Error, "parallel limit") {
		t.Fatalf("skipped targets must say why: %+v", res.Targets[1])
	}
	if w.snapshot("n1").cordonedBy != "" {
		t.Fatal("a second node went out of service")
	}
	// With two slots, the failed node holds one and the others roll one by one through the other.
	w2 := newWorld(allNodes...)
	rb2 := testRunbook(w2, "v10", newCounters(), nil)
	rb2.OutOfService, rb2.Steps[1].Act = rb.OutOfService, func(ctx context.Context, f facts) error {
		if f.name == "n0" {
			return errors.New("flash failed")
		}
		w2.update(f.name, func(n *memNode) { n.labels[prepLabel] = "v10" })
		return nil
	}
	res = Run(context.Background(), rb2, targets(w2, allNodes...), Options{KeepGoing: true, Parallel: 2})
	if res.Targets[1].Outcome != OutcomeDone || res.Targets[2].Outcome != OutcomeDone {
		t.Fatalf("with a free slot the others must roll: %+v", res.Targets)
	}
}

type soakRecorder struct {
	mu    sync.Mutex
	soaks int
}

func (r *soakRecorder) Step(target string, s StepResult) {
	if target == "soak" && s.Status == StepActed {
		r.mu.Lock()
		r.soaks++
		r.mu.Unlock()
	}
}
func (r *soakRecorder) TargetDone(TargetResult) {}

func TestSoakAfterEveryNodeWhenNoCanary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(allNodes...)
		rep := &soakRecorder{}
		checks := 0
		res := Run(context.Background(), testRunbook(w, "v11", newCounters(), nil), targets(w, allNodes...), Options{
			Soak: 30 * time.Millisecond, Reporter: rep, Health: func(context.Context) error { checks++; return nil },
		})
		if res.Outcome != OutcomeDone || rep.soaks != 2 || checks < 2 {
			t.Fatalf("outcome %s, %d soaks (want 2: between 3 nodes), %d health checks", res.Outcome, rep.soaks, checks)
		}
	})
}

func TestCanaryHealthFailurePausesTheRoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(allNodes...)
		var persisted string
		res := Run(context.Background(), testRunbook(w, "v12", newCounters(), nil), targets(w, allNodes...), Options{
			Canary: 1, Soak: time.Second,
			Health:          func(context.Context) error { return errors.New("node/n0: pod app-1 not Ready") },
			OnHealthFailure: func(_ context.Context, why string) { persisted = why },
		})
		if res.Outcome != OutcomePaused || res.Targets[0].Outcome != OutcomeDone || res.Targets[1].Outcome != OutcomePaused {
			t.Fatalf("want the canary done and the roll paused: %s %+v", res.Outcome, res.Targets)
		}
		if !strings.Contains(persisted, "app-1 not Ready") || !strings.Contains(res.Targets[1].Error, "health check failed") {
			t.Fatalf("the failed check must pause with its reason: %q / %+v", persisted, res.Targets[1])
		}
		if w.snapshot("n1").cordonedBy != "" {
			t.Fatal("the roll went on after a failed canary")
		}
	})
}

// A transient API error (503, dropped connection) is not the target's
// fault: the engine observes again and finishes; a refusal (403) stands.
func TestTransientAPIErrorsAreRetriedFromAFreshObservation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		failures int
		want     Outcome
	}{
		{"503 twice", apierrors.NewServiceUnavailable("etcd leader changed"), 2, OutcomeDone},
		{"connection reset", fmt.Errorf("patch node: %w", syscall.ECONNRESET), 1, OutcomeDone},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("no")), 1, OutcomeFailed},
		{"503 forever", apierrors.NewServiceUnavailable("down"), 100, OutcomeFailed},
		// The step's own look found the world moved since the observation
		// (a pod landed): nothing was done, so observe again and carry on.
		{"changed since the look", Again(errors.New("a second look found a new pod")), 1, OutcomeDone},
		{"changed forever", Again(errors.New("a second look found a new pod")), 100, OutcomeFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld("n1")
			cnt := newCounters()
			rb := testRunbook(w, "v2", cnt, nil)
			failing := tc.failures
			inner := rb.Steps[1].Act
			rb.Steps[1].Act = func(ctx context.Context, f facts) error {
				if failing > 0 {
					failing--
					return tc.err
				}
				return inner(ctx, f)
			}
			res := Run(context.Background(), rb, targets(w, "n1"), Options{RetryBackoff: time.Millisecond})
			if res.Outcome != tc.want {
				t.Fatalf("outcome %s, want %s: %+v", res.Outcome, tc.want, res.Targets)
			}
			if tc.want == OutcomeDone && cnt.get(rb.Steps[1].ID) != 1 {
				t.Errorf("the step acted %d times after its failures, want once", cnt.get(rb.Steps[1].ID))
			}
			if tried := tc.failures - failing; tc.name == "forbidden" && tried != 1 {
				t.Errorf("a refusal was tried %d times, want once (never retried)", tried)
			}
		})
	}
}

// Two targets may not both pass a shared budget on the same count: with one
// node already out (left by an earlier run) and a budget of two, the
// Exclusive cordon lets one target in and makes the other wait until it
// ends, so no more than two nodes are ever out. Without Exclusive, both
// observe one node out and both cordon.
func TestExclusiveStepsSpendASharedBudgetOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, exclusive := range []bool{false, true} {
			w := newWorld("n0", "n1", "n2")
			w.update("n0", func(n *memNode) { n.cordonedBy = owner })
			out := outOfService{now: 1, max: 1} // n0 is out already
			observed := make(chan struct{}, 2)
			both := make(chan struct{})
			go func() { <-observed; <-observed; close(both) }()
			var firstObservation sync.Map
			outOthers := func(self string) int { return w.cordonedOthers(self, "n0", "n1", "n2") }
			rb := &Runbook[facts]{
				Name: owner,
				Observe: func(_ context.Context, tg Target) (facts, error) {
					name := strings.TrimPrefix(tg.Name(), "node/")
					f := facts{name: name, node: w.snapshot(name), target: "v2"}
					f.target = fmt.Sprint(outOthers(name))
					if _, seen := firstObservation.LoadOrStore(name, true); !seen {
						observed <- struct{}{}
						<-both // both targets have observed before either acts: the race, every time
					}
					return f, nil
				},
				Steps: budgetedSteps(w, exclusive, &out),
			}
			res := Run(context.Background(), rb, targets(w, "n1", "n2"), Options{Parallel: 2})
			got := out.most()
			switch {
			case exclusive && (got != 2 || res.Outcome != OutcomeDone):
				t.Errorf("exclusive: %d nodes out at most (want 2), outcome %s: %+v", got, res.Outcome, res.Targets)
			case !exclusive && got != 3:
				t.Errorf("without Exclusive the race should show (3 nodes out); got %d", got)
			}
		}
	})
}

// A target waiting for the out-of-service budget goes on as soon as another
// target is back in service, not when that target has run its last steps:
// here n1's cleanup step waits for n2's cordon, which must not wait for n1
// to end.
func TestBudgetFreedWhenATargetIsBackInService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld("n1", "n2")
		cordoned := map[string]chan struct{}{"n1": make(chan struct{}), "n2": make(chan struct{})}
		outOthers := func(self string) int { return w.cordonedOthers(self, "n1", "n2") }
		other := map[string]string{"n1": "n2", "n2": "n1"}
		spent := make(chan struct{}) // the other node saw the budget spent
		var spentOnce sync.Once
		var mu sync.Mutex
		var order []string
		note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
		rb := &Runbook[facts]{
			Name: owner,
			Observe: func(_ context.Context, tg Target) (facts, error) {
				name := strings.TrimPrefix(tg.Name(), "node/")
				f := facts{name: name, node: w.snapshot(name), target: fmt.Sprint(outOthers(name))}
				if f.target != "0" {
					spentOnce.Do(func() { close(spent) })
				}
				return f, nil
			},
			OutOfService: func(f facts) bool { return f.node.cordonedBy == owner },
			Steps: []Step[facts]{
				{ID: "cordon", Exclusive: true,
					Done: func(f facts) (bool, string) {
						return f.node.cordonedBy == owner || f.node.labels[testLabel] == "v2", ""
					},
					Guards: []Guard[facts]{{Name: "budget", SharedBudget: true, Check: func(f facts) (bool, string) {
						return f.target == "0", "a node is out already"
					}}},
					Act: func(_ context.Context, f facts) error {
						w.update(f.name, func(n *memNode) { n.cordonedBy = owner })
						note("cordon " + f.name)
						close(cordoned[f.name])
						return nil
					}},
				{ID: "upgrade-and-uncordon",
					Done: func(f facts) (bool, string) { return f.node.labels[testLabel] == "v2" && f.node.cordonedBy == "", "" },
					Act: func(_ context.Context, f facts) error {
						select { // give the other node time to wait for the budget
						case <-spent:
							synctest.Wait() // until the other node waits for the budget
						case <-time.After(2 * time.Second):
						}
						w.update(f.name, func(n *memNode) { n.labels[testLabel] = "v2"; n.cordonedBy = "" })
						return nil
					}},
				{ID: "cleanup",
					Done: func(f facts) (bool, string) { return f.node.annotations["cleaned"] == "yes", "" },
					Act: func(_ context.Context, f facts) error {
						select { // the first node's cleanup overlaps the next node's cordon
						case <-cordoned[other[f.name]]:
						case <-time.After(2 * time.Second):
						}
						note("cleanup " + f.name)
						w.update(f.name, func(n *memNode) { n.annotations["cleaned"] = "yes" })
						return nil
					}},
			},
		}
		res := Run(context.Background(), rb, targets(w, "n1", "n2"), Options{Parallel: 1, Prefetch: 1})
		mu.Lock()
		defer mu.Unlock()
		if res.Outcome != OutcomeDone || len(order) != 4 || !strings.HasPrefix(order[1], "cordon ") {
			t.Errorf("n2 should be cordoned once n1 is uncordoned, before n1's cleanup: order %v, outcome %s", order, res.Outcome)
		}
	})
}

// The step before an Exclusive one takes the exclusion before observing its
// own result, so that observation is the Exclusive step's: one observation
// fewer per target, and the budget still holds with both targets racing
// (n0 already out, a budget of two: one target cordons, the other waits).
func TestExclusiveStepDecidesOnTheObservationAfterTheStepBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld("n0", "n1", "n2")
		w.update("n0", func(n *memNode) { n.cordonedBy = owner })
		var mu sync.Mutex
		out := outOfService{now: 1, max: 1} // n0 is out already
		observations := map[string]int{}
		outOthers := func(self string) int { return w.cordonedOthers(self, "n0", "n1", "n2") }
		probed := make(chan struct{}, 2)
		both := make(chan struct{})
		go func() { <-probed; <-probed; close(both) }()
		rb := &Runbook[facts]{
			Name: owner,
			Observe: func(_ context.Context, tg Target) (facts, error) {
				name := strings.TrimPrefix(tg.Name(), "node/")
				mu.Lock()
				observations[name]++
				mu.Unlock()
				return facts{name: name, node: w.snapshot(name), target: fmt.Sprint(outOthers(name))}, nil
			},
			Steps: append([]Step[facts]{
				{ID: "probe",
					Done: func(f facts) (bool, string) { return f.node.annotations["probed"] == "yes", "" },
					Act: func(_ context.Context, f facts) error {
						w.update(f.name, func(n *memNode) { n.annotations["probed"] = "yes" })
						probed <- struct{}{}
						<-both // both probed before either observes: the race, every time
						return nil
					}},
			}, budgetedSteps(w, true, &out)...),
		}
		res := Run(context.Background(), rb, targets(w, "n1", "n2"), Options{Parallel: 2})
		mu.Lock()
		defer mu.Unlock()
		if got := out.most(); got != 2 || res.Outcome != OutcomeDone {
			t.Errorf("%d nodes out at most (want 2), outcome %s: %+v", got, res.Outcome, res.Targets)
		}
		// Initial, after probe (the cordon's too), after cordon, after upgrade;
		// the target that waited for the budget observes once more.
		if total := observations["n1"] + observations["n2"]; total != 9 {
			t.Errorf("observations %v (total %d), want 4 and 5", observations, total)
		}
	})
}

// After a step acts, the engine asks for the parts that step's Done
// (DoneReads) and the next step read, carrying the rest over; a step deciding on a part the last
// observation did not read (the step before it was already done) gets a
// full observation first.
func TestObservationAfterAStepReadsWhatTheNextDecisionNeeds(t *testing.T) {
	const (
		partNode Parts = 1 << iota
		partPods
	)
	w := newWorld("n1")
	var asked []Parts
	observe := func(tg Target) facts {
		name := strings.TrimPrefix(tg.Name(), "node/")
		return facts{name: name, node: w.snapshot(name)}
	}
	mark := func(key string) func(context.Context, facts) error {
		return func(_ context.Context, f facts) error {
			w.update(f.name, func(n *memNode) { n.annotations[key] = "yes" })
			return nil
		}
	}
	done := func(key string) func(facts) (bool, string) {
		return func(f facts) (bool, string) { return f.node.annotations[key] == "yes", "" }
	}
	// "c" is done before the run starts, so after "b" acts the engine reaches
	// "d" on an observation made for "b" and "c" only.
	w.update("n1", func(n *memNode) { n.annotations["c"] = "yes" })
	rb := &Runbook[facts]{
		Name: owner,
		Observe: func(_ context.Context, tg Target) (facts, error) {
			asked = append(asked, AllParts)
			return observe(tg), nil
		},
		ObserveParts: func(_ context.Context, tg Target, parts Parts, _ facts) (facts, error) {
			asked = append(asked, parts)
			return observe(tg), nil
		},
		Steps: []Step[facts]{
			{ID: "a", Reads: partNode | partPods, Done: done("a"), Act: mark("a")},
			{ID: "b", Reads: partNode | partPods, DoneReads: partNode, Done: done("b"), Act: mark("b")},
			{ID: "c", Reads: partNode, Done: done("c"), Act: mark("c")},
			{ID: "d", Reads: partPods, Done: done("d"), Act: mark("d")},
		},
	}
	res := Run(context.Background(), rb, targets(w, "n1"), Options{})
	want := []Parts{AllParts, partNode | partPods, partNode, AllParts, partPods}
	if res.Outcome != OutcomeDone || !slices.Equal(asked, want) {
		t.Errorf("observations asked for %v, want %v (outcome %s)", asked, want, res.Outcome)
	}
}

// A long step's clock is not cleared by a write of its own: the next step's
// write may take it along (one node write fewer per node), and when that
// step's write does not, the engine removes it once that step has acted.
func TestClockOfADoneStepGoesWithTheNextStepsWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, takesItAlong := range []bool{true, false} {
			w := newWorld("n0")
			clockWrites := 0
			counting := countingTarget{memTarget: memTarget{w: w, name: "n0"}, writes: &clockWrites}
			var seenWhileRecording string
			rb := &Runbook[facts]{
				Name: owner,
				Observe: func(_ context.Context, tg Target) (facts, error) {
					return facts{name: "n0", node: w.snapshot("n0")}, nil
				},
				Annotation: func(f facts, key string) (string, bool) { v, ok := f.node.annotations[key]; return v, ok },
				Steps: []Step[facts]{
					{ID: "flash", Timeout: time.Minute,
						Done: func(f facts) (bool, string) { return f.node.labels[testLabel] != "", "" },
						Act: func(context.Context, facts) error {
							time.Sleep(150 * time.Millisecond) // longer than the clock delay
							w.update("n0", func(n *memNode) { n.labels[testLabel] = "flashed" })
							return nil
						}},
					{ID: "record",
						Done: func(f facts) (bool, string) { return f.node.labels[prepLabel] == "recorded", "" },
						Act: func(_ context.Context, f facts) error {
							seenWhileRecording = f.node.annotations[TimerKey(owner)]
							w.update("n0", func(n *memNode) {
								n.labels[prepLabel] = "recorded"
								if takesItAlong {
									delete(n.annotations, TimerKey(owner))
								}
							})
							return nil
						}},
					{ID: "uncordon",
						Done: func(f facts) (bool, string) { return f.node.labels["done"] == "yes", "" },
						Act: func(context.Context, facts) error {
							w.update("n0", func(n *memNode) { n.labels["done"] = "yes" })
							return nil
						}},
				},
			}
			res := Run(context.Background(), rb, []Target{counting}, Options{ClockDelay: 50 * time.Millisecond})
			if res.Outcome != OutcomeDone {
				t.Fatalf("outcome %s: %+v", res.Outcome, res.Targets)
			}
			if !strings.HasPrefix(seenWhileRecording, "flash@") {
				t.Errorf("the next step should see the done step's clock to take it along; saw %q", seenWhileRecording)
			}
			if v, ok := w.snapshot("n0").annotations[TimerKey(owner)]; ok {
				t.Errorf("takesItAlong=%v: the clock outlived its step: %q", takesItAlong, v)
			}
			if want := map[bool]int{true: 1, false: 2}[takesItAlong]; clockWrites != want {
				t.Errorf("takesItAlong=%v: %d clock writes, want %d", takesItAlong, clockWrites, want)
			}
		}
	})
}

type countingTarget struct {
	memTarget
	writes *int
}

func (c countingTarget) SetAnnotation(ctx context.Context, key string, value *string) error {
	*c.writes++
	return c.memTarget.SetAnnotation(ctx, key, value)
}

// outOfService counts the nodes a budgeted runbook has out at once.
type outOfService struct {
	mu       sync.Mutex
	now, max int
}

func (o *outOfService) add(d int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now += d
	o.max = max(o.max, o.now)
}

func (o *outOfService) most() int { o.mu.Lock(); defer o.mu.Unlock(); return o.max }

// budgetedSteps cordon a node against a budget of two nodes out (the
// facts' target carries the count of the others out), then upgrade and
// uncordon it, counting the nodes out in out.
func budgetedSteps(w *world, exclusive bool, out *outOfService) []Step[facts] {
	return []Step[facts]{
		{ID: "cordon", Exclusive: exclusive,
			Done: func(f facts) (bool, string) {
				return f.node.cordonedBy == owner || f.node.labels[testLabel] == "v2", ""
			},
			Guards: []Guard[facts]{{Name: "budget", SharedBudget: true, Check: func(f facts) (bool, string) {
				return f.target < "2", "two nodes are out already"
			}}},
			Act: func(_ context.Context, f facts) error {
				w.update(f.name, func(n *memNode) { n.cordonedBy = owner })
				out.add(1)
				return nil
			}},
		{ID: "upgrade-and-uncordon",
			Done: func(f facts) (bool, string) { return f.node.labels[testLabel] == "v2" && f.node.cordonedBy == "", "" },
			Act: func(_ context.Context, f facts) error {
				time.Sleep(20 * time.Millisecond)
				w.update(f.name, func(n *memNode) { n.labels[testLabel] = "v2"; n.cordonedBy = "" })
				out.add(-1)
				return nil
			}},
	}
}

// cordonedOthers counts the nodes among names, but self, cordoned by owner.
func (w *world) cordonedOthers(self string, names ...string) int {
	n := 0
	for _, name := range names {
		if name != self && w.snapshot(name).cordonedBy == owner {
			n++
		}
	}
	return n
}

// A failure budget of 2: the first failure does not stop the roll, the
// second does, and nothing starts after it.
func TestMaxFailuresStopsAtTheBudget(t *testing.T) {
	w := newWorld(allNodes...)
	rb := testRunbook(w, "v5", newCounters(), nil)
	act := rb.Steps[1].Act
	rb.Steps[1].Act = func(ctx context.Context, f facts) error {
		if f.name != allNodes[len(allNodes)-1] {
			return errors.New("helper failed")
		}
		return act(ctx, f)
	}
	res := Run(context.Background(), rb, targets(w, allNodes...), Options{MaxFailures: 2})
	got := []Outcome{}
	for _, r := range res.Targets {
		got = append(got, r.Outcome)
	}
	if res.Outcome != OutcomeFailed || got[0] != OutcomeFailed || got[1] != OutcomeFailed || got[2] != OutcomeSkipped {
		t.Fatalf("want failed, failed, skipped: %v", got)
	}
	if !strings.Contains(res.Targets[2].Error, "failure budget of 2") {
		t.Fatalf("the skipped target does not say why: %q", res.Targets[2].Error)
	}
}

// An Exclusive step reached past a step that was done already decides on
// an observation made inside its exclusion of what it reads, not on a full
// one and a second one after it (five requests a kmd node, whose cordon
// follows the module step, done without acting).
func TestExclusiveStepPastADoneStepObservesOnce(t *testing.T) {
	const (
		partNode Parts = 1 << iota
		partPods
	)
	w := newWorld("n1")
	var asked []Parts
	observe := func(tg Target, parts Parts) facts {
		asked = append(asked, parts)
		name := strings.TrimPrefix(tg.Name(), "node/")
		return facts{name: name, node: w.snapshot(name)}
	}
	mark := func(key string) func(context.Context, facts) error {
		return func(_ context.Context, f facts) error {
			w.update(f.name, func(n *memNode) { n.annotations[key] = "yes" })
			return nil
		}
	}
	done := func(key string) func(facts) (bool, string) {
		return func(f facts) (bool, string) { return f.node.annotations[key] == "yes", "" }
	}
	w.update("n1", func(n *memNode) { n.annotations["b"] = "yes" })
	rb := &Runbook[facts]{
		Name: owner,
		Observe: func(_ context.Context, tg Target) (facts, error) {
			return observe(tg, AllParts), nil
		},
		ObserveParts: func(_ context.Context, tg Target, parts Parts, _ facts) (facts, error) {
			return observe(tg, parts), nil
		},
		Steps: []Step[facts]{
			{ID: "a", Reads: partNode, Done: done("a"), Act: mark("a")},
			{ID: "b", Reads: partNode, Done: done("b"), Act: mark("b")},
			{ID: "c", Reads: partPods, Exclusive: true, Done: done("c"), Act: mark("c"), Guards: []Guard[facts]{{Name: "budget", SharedBudget: true, Check: func(facts) (bool, string) { return true, "" }}}},
		},
	}
	res := Run(context.Background(), rb, targets(w, "n1"), Options{})
	// Initial; after a (a's and b's reads); c's own parts inside c's
	// exclusion (the node, read after a, is carried); after c.
	want := []Parts{AllParts, partNode, partPods, partPods}
	if res.Outcome != OutcomeDone || !slices.Equal(asked, want) {
		t.Errorf("observations asked for %v, want %v (outcome %s)", asked, want, res.Outcome)
	}
}

// A SharedBudget guard with a Settle waits, with no other target in
// progress, for the Settle to see its budget come back (something outside
// the run frees it, a PDB's replaced pod becoming ready), observes again and
// goes on; a Settle that gives up blocks the target, unchanged.
func TestSettleWaitsForABudgetFreedOutsideTheRun(t *testing.T) {
	for _, frees := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			w := newWorld("n1")
			var mu sync.Mutex
			allowed := false
			freed := make(chan struct{})
			go func() {
				time.Sleep(time.Minute)
				if frees {
					mu.Lock()
					allowed = true
					mu.Unlock()
					close(freed)
				}
			}()
			settles := 0
			rb := &Runbook[facts]{
				Name: owner,
				Observe: func(_ context.Context, tg Target) (facts, error) {
					name := strings.TrimPrefix(tg.Name(), "node/")
					mu.Lock()
					defer mu.Unlock()
					return facts{name: name, node: w.snapshot(name), target: fmt.Sprint(allowed)}, nil
				},
				Steps: []Step[facts]{{ID: "cordon", Exclusive: true,
					Done: func(f facts) (bool, string) { return f.node.cordonedBy == owner, "" },
					Guards: []Guard[facts]{{Name: "budget", SharedBudget: true,
						Check: func(f facts) (bool, string) { return f.target == "true", "no disruption allowed" },
						Settle: func(ctx context.Context, _ facts) bool {
							settles++
							select {
							case <-freed:
								return true
							case <-time.After(2 * time.Minute):
								return false
							case <-ctx.Done():
								return false
							}
						}}},
					Act: func(_ context.Context, f facts) error {
						w.update(f.name, func(n *memNode) { n.cordonedBy = owner })
						return nil
					}}},
			}
			rep := &waitRecorder{}
			res := Run(context.Background(), rb, targets(w, "n1"), Options{Reporter: rep})
			cordoned := w.snapshot("n1").cordonedBy == owner
			if !slices.ContainsFunc(rep.lines, func(l string) bool { return strings.Contains(l, "waiting: budget: no disruption allowed") }) {
				t.Errorf("the wait was not reported: %q", rep.lines)
			}
			switch {
			case frees && (res.Outcome != OutcomeDone || !cordoned || settles != 1):
				t.Errorf("freed: outcome %s, cordoned %v, %d settle(s); want done after one", res.Outcome, cordoned, settles)
			case !frees && (res.Outcome != OutcomeBlocked || cordoned):
				t.Errorf("not freed: outcome %s, cordoned %v; want blocked, uncordoned", res.Outcome, cordoned)
			}
		})
	}
}

// waitRecorder keeps what the engine reports of a step acting.
type waitRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *waitRecorder) Step(target string, s StepResult) {
	if s.Status == StepActing {
		r.mu.Lock()
		r.lines = append(r.lines, target+" "+s.Evidence)
		r.mu.Unlock()
	}
}
func (r *waitRecorder) TargetDone(TargetResult) {}

// A step's budget is judged on the clock that stored it (Options.Now: the
// API server's in a session), not this machine's: a laptop an hour ahead of
// the server resumes a step the server's clock says started 50 s ago with
// the 10 s left of its minute, neither an hour late nor at once.
func TestStepBudgetIsJudgedOnTheStoringClock(t *testing.T) {
	for name, skew := range map[string]time.Duration{"laptop ahead": time.Hour, "laptop behind": -time.Hour} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				server := func() time.Time { return time.Now().Add(-skew) }
				w := newWorld("n0")
				target := memTarget{w: w, name: "n0"}
				ctx := t.Context()
				started := "test.prepare@" + server().Add(-50*time.Second).UTC().Format(time.RFC3339)
				if err := target.SetAnnotation(ctx, TimerKey(owner), &started); err != nil {
					t.Fatal(err)
				}
				w.update("n0", func(n *memNode) { n.cordonedBy = owner })
				rb := testRunbook(w, "v7", newCounters(), nil)
				rb.Steps[1].Timeout = time.Minute
				rb.Steps[1].Wait = func(ctx context.Context, _ facts) error { <-ctx.Done(); return ctx.Err() }
				begin := time.Now()
				res := Run(ctx, rb, []Target{target}, Options{Now: server})
				step := res.Targets[0].Steps[1]
				if res.Outcome != OutcomeFailed || !strings.Contains(step.Error, "budget") {
					t.Fatalf("want a failed step naming its spent budget, got %s: %+v", res.Outcome, step)
				}
				if took := time.Since(begin); took != 10*time.Second {
					t.Fatalf("the budget ran out after %s, want the 10s left on the server's clock", took)
				}
			})
		})
	}
}

// Targets queued for a shared budget observe again only as it frees: each
// end wakes the waiters one at a time, and once one of them has taken the
// freed share the rest wait for the next end instead of each observing (in
// tt three requests) to find the budget spent again. Eight targets in
// flight at once, a budget of two out of service: a target observes to
// start, inside the exclusion, after each of its two steps, and each of the
// six that queue once more, for the end that freed its share: 5N - 2 = 38
// (44 when every end woke every waiter).
func TestQueuedTargetsObserveOncePerFreedShare(t *testing.T) {
	if n := budgetObservations(t, 0, func(*Guard[facts]) {}); n > 5*8-2 {
		t.Errorf("%d observations for 8 targets (limit %d): queued targets observe again on every end", n, 5*8-2)
	}
}

// A Uniform budget found spent is not observed again by the targets that
// reach it before the next end: they wait for that end first.
func TestUniformBudgetSpentIsNotObservedAgainBeforeAnEnd(t *testing.T) {
	plain := budgetObservations(t, 0, func(*Guard[facts]) {})
	uniform := budgetObservations(t, 0, func(g *Guard[facts]) { g.Uniform = true })
	// Six of the eight targets reach the cordon with both slots taken; the
	// first of them observes that, the other five need not.
	if uniform > plain-5 {
		t.Errorf("%d observations with a Uniform budget, %d without: the targets queued behind a spent budget observed it",
			uniform, plain)
	}
}

// haltRunbook probes (taking probeTime on n2 and n3), cordons within a
// budget of limit nodes, flashes, which fails on n1, and uncordons.
func haltRunbook(w *world, limit int, probeTime time.Duration) *Runbook[facts] {
	names := []string{"n1", "n2", "n3"}
	return &Runbook[facts]{
		Name: owner,
		Observe: func(_ context.Context, tg Target) (facts, error) {
			name := strings.TrimPrefix(tg.Name(), "node/")
			return facts{name: name, node: w.snapshot(name), target: fmt.Sprint(w.cordonedOthers(name, names...))}, nil
		},
		OutOfService: func(f facts) bool { return f.node.cordonedBy == owner },
		Steps: []Step[facts]{
			{ID: "probe",
				Done: func(f facts) (bool, string) { return f.node.annotations["probed"] == "yes", "" },
				Act: func(_ context.Context, f facts) error {
					if f.name != "n1" {
						time.Sleep(probeTime)
					}
					w.update(f.name, func(n *memNode) { n.annotations["probed"] = "yes" })
					return nil
				}},
			{ID: "cordon", Exclusive: true,
				Done: func(f facts) (bool, string) { return f.node.cordonedBy == owner, "" },
				Guards: []Guard[facts]{{Name: "budget", SharedBudget: true, Check: func(f facts) (bool, string) {
					return f.target < fmt.Sprint(limit), "the budget is spent"
				}}},
				Act: func(_ context.Context, f facts) error {
					w.update(f.name, func(n *memNode) { n.cordonedBy = owner })
					return nil
				}},
			{ID: "flash",
				Done: func(f facts) (bool, string) { return f.node.labels[testLabel] == "v2", "" },
				Act: func(_ context.Context, f facts) error {
					time.Sleep(10 * time.Second)
					if f.name == "n1" {
						return errors.New("flash failed")
					}
					w.update(f.name, func(n *memNode) { n.labels[testLabel] = "v2" })
					return nil
				}},
			{ID: "uncordon",
				Done: func(f facts) (bool, string) { return f.node.cordonedBy == "", "" },
				Act: func(_ context.Context, f facts) error {
					w.update(f.name, func(n *memNode) { n.cordonedBy = "" })
					return nil
				}},
		},
	}
}

// A run that halts takes no more targets out of service: the prefetched
// ones (probed, changed nothing) end skipped with the halt's cause, both
// those waiting for the budget the failed node holds and one that reaches
// its cordon after the halt with budget to spare. Without it, which of the
// two a prefetched target met decided its outcome (blocked by the budget,
// or cordoned after the run had halted).
func TestAHaltedRunTakesNoPrefetchedTargetOutOfService(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     int
		probeTime time.Duration
	}{
		{"waiting for the budget", 1, time.Second},
		{"budget to spare after the halt", 2, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld("n1", "n2", "n3")
				res := Run(context.Background(), haltRunbook(w, tc.limit, tc.probeTime), targets(w, "n1", "n2", "n3"),
					Options{Parallel: tc.limit, Prefetch: 2})
				if res.Targets[0].Outcome != OutcomeFailed {
					t.Fatalf("n1: %+v", res.Targets[0])
				}
				for _, r := range res.Targets[1:] {
					if r.Outcome != OutcomeSkipped || !strings.Contains(r.Error, "node/n1 failed") {
						t.Errorf("%s: %s (%s); want skipped for n1's failure", r.Target, r.Outcome, r.Error)
					}
					if n := strings.TrimPrefix(r.Target, "node/"); w.snapshot(n).cordonedBy != "" {
						t.Errorf("%s was taken out of service after the run halted", r.Target)
					}
				}
			})
		})
	}
}

// One end frees one share: of the targets waiting for it, one observes
// and takes it, and the others wait on. Every waiter the end's broadcast
// woke used to get past the check while the first stopped its settle,
// before it took the exclusion, so each observed in turn, only to find the
// share gone.
func TestAnEndIsObservedByOneWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newExclusion()
		e.started() // the target whose end frees the share
		// A settle that never fires (a PDB that stays at zero) and takes a
		// moment to stop (its watch closing): the waiter an end wakes stops
		// it, and the other waiters run meanwhile.
		never := func(ctx context.Context) bool { <-ctx.Done(); time.Sleep(time.Millisecond); return false }
		woke := startWaiters(ctx, e, 3, never)
		synctest.Wait()
		e.released("node/n0")
		time.Sleep(time.Second) // every settle stopped, and whoever woke has observed
		if n := woke.Load(); n != 1 {
			t.Errorf("one end woke %d waiters to observe, want 1", n)
		}
		e.released("node/n1") // the taker's own end, later: the next waiter's turn
		time.Sleep(time.Second)
		if n := woke.Load(); n != 2 {
			t.Errorf("after a second end %d waiters had observed, want 2", n)
		}
		e.halt("test over")
		time.Sleep(time.Second)
	})
}

// A target that reaches the budget while an end's share is free (it had
// not waited) and takes it marks that end seen for the waiters, as a
// woken waiter does: the share is gone, and the waiter would observe only
// to find so.
func TestANewcomerTakingAFreedShareSparesTheWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newExclusion()
		e.started() // the target whose end frees the share
		woke := startWaiters(ctx, e, 1, nil)
		synctest.Wait()
		e.started()
		seen := e.enter(ctx) // the newcomer holds the exclusion as the end comes
		e.released("node/n0")
		pass := Step[facts]{ID: "cordon", Exclusive: true,
			Guards: []Guard[facts]{{Name: "budget", SharedBudget: true, Check: func(facts) (bool, string) { return true, "" }}}}
		if _, reason, err := decideExclusive(ctx, &Runbook[facts]{}, pass, nil, e, facts{}, seen,
			func(string) {}); reason != "" || err != nil {
			t.Fatalf("the newcomer's decision: %q, %v", reason, err)
		}
		e.leave()
		synctest.Wait()
		if woke.Load() != 0 {
			t.Errorf("the waiter woke to observe a share the newcomer took")
		}
		e.halt("test over")
		synctest.Wait()
	})
}

// startWaiters starts n targets waiting for an end; each that an end wakes
// counts itself, takes the share and leaves the exclusion.
func startWaiters(ctx context.Context, e *exclusion, n int, settle func(context.Context) bool) *atomic.Int32 {
	var woke atomic.Int32
	for range n {
		e.started()
		go func() {
			seen := e.enter(ctx)
			if _, ended := e.waitForAnEnd(ctx, seen, settle); !ended {
				e.leave() // the halt at the test's end
				return
			}
			woke.Add(1)
			e.took()
			e.leave()
		}()
	}
	return &woke
}

// A step's Unchanged parts are carried to the observation after its Act
// (a kmd node's label write, and the helper pods the cleanup after it
// reads: one pod list a node), but never across a Wait.
func TestUnchangedPartsAreCarriedPastActButNotPastAWait(t *testing.T) {
	const (
		partNode Parts = 1 << iota
		partPods
	)
	for _, waits := range []bool{false, true} {
		w := newWorld("n1")
		var asked []Parts
		observe := func(tg Target, parts Parts) facts {
			asked = append(asked, parts)
			name := strings.TrimPrefix(tg.Name(), "node/")
			return facts{name: name, node: w.snapshot(name)}
		}
		mark := func(key string) func(context.Context, facts) error {
			return func(_ context.Context, f facts) error {
				w.update(f.name, func(n *memNode) { n.annotations[key] = "yes" })
				return nil
			}
		}
		done := func(key string) func(facts) (bool, string) {
			return func(f facts) (bool, string) { return f.node.annotations[key] == "yes", "" }
		}
		label := Step[facts]{ID: "label", Reads: partNode | partPods, Unchanged: partPods, Done: done("label"), Act: mark("label")}
		if waits {
			label.Wait = func(context.Context, facts) error { return nil }
		}
		rb := &Runbook[facts]{
			Name: owner,
			Observe: func(_ context.Context, tg Target) (facts, error) {
				return observe(tg, AllParts), nil
			},
			ObserveParts: func(_ context.Context, tg Target, parts Parts, _ facts) (facts, error) {
				return observe(tg, parts), nil
			},
			Steps: []Step[facts]{label, {ID: "cleanup", Reads: partPods, Done: done("cleanup"), Act: mark("cleanup")}},
		}
		res := Run(context.Background(), rb, targets(w, "n1"), Options{})
		// Initial; after label (its node, and the pods the cleanup reads
		// unless a Wait came between); after cleanup.
		want := []Parts{AllParts, partNode, partPods}
		if waits {
			want[1] = partNode | partPods
		}
		if res.Outcome != OutcomeDone || !slices.Equal(asked, want) {
			t.Errorf("waits %v: observations asked for %v, want %v (outcome %s)", waits, asked, want, res.Outcome)
		}
	}
}

// A target that takes a Uniform budget's last share says so: the targets
// reaching the step after it, before the next end, wait for that end
// instead of observing a budget it just spent (a kmd node arriving from
// its probe just after the waiter an end woke took the slot).
func TestTheLastShareTakenIsNotObservedAgainBeforeAnEnd(t *testing.T) {
	plain := budgetObservations(t, 4*time.Second, func(g *Guard[facts]) { g.Uniform = true })
	last := budgetObservations(t, 4*time.Second, func(g *Guard[facts]) {
		g.Uniform, g.LastShare = true, func(f facts) bool { return f.target == "1" }
	})
	t.Logf("%d observations when the last share is said, %d when not", last, plain)
	// Six targets arrive with both shares taken, four of them just after a
	// take and before any end (the others arrive as an end comes).
	if last > plain-4 {
		t.Errorf("%d observations when the last share is said, %d when not: a target observed the budget a take just spent",
			last, plain)
	}
}

// budgetObservations runs eight targets through a budget of two (its guard
// as tune sets it) whose helpers take 10 s, so the others queue, and
// returns how many observations the run made. With arriveEvery, target i
// first spends (i+1) × arriveEvery in a step of its own (a probe), so the
// targets reach the budget one by one.
func budgetObservations(t *testing.T, arriveEvery time.Duration, tune func(*Guard[facts])) int {
	observations := 0
	synctest.Test(t, func(t *testing.T) {
		names := []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"}
		w := newWorld(names...)
		var mu sync.Mutex
		out := outOfService{}
		steps := budgetedSteps(w, true, &out)
		tune(&steps[0].Guards[0])
		steps[1].Act = func(_ context.Context, f facts) error {
			time.Sleep(10 * time.Second) // a helper that takes a while: every other target queues
			w.update(f.name, func(n *memNode) { n.labels[testLabel] = "v2"; n.cordonedBy = "" })
			out.add(-1)
			return nil
		}
		if arriveEvery > 0 {
			arrive := Step[facts]{ID: "arrive",
				Done: func(f facts) (bool, string) { return f.node.annotations["arrived"] == "yes", "" },
				Act: func(_ context.Context, f facts) error {
					time.Sleep(time.Duration(slices.Index(names, f.name)+1) * arriveEvery)
					w.update(f.name, func(n *memNode) { n.annotations["arrived"] = "yes" })
					return nil
				}}
			steps = append([]Step[facts]{arrive}, steps...)
		}
		rb := &Runbook[facts]{
			Name: owner,
			Observe: func(_ context.Context, tg Target) (facts, error) {
				mu.Lock()
				observations++
				mu.Unlock()
				name := strings.TrimPrefix(tg.Name(), "node/")
				return facts{name: name, node: w.snapshot(name), target: fmt.Sprint(w.cordonedOthers(name, names...))}, nil
			},
			OutOfService: func(f facts) bool { return f.node.cordonedBy == owner },
			Steps:        steps,
		}
		res := Run(context.Background(), rb, targets(w, names...), Options{Parallel: len(names)})
		if res.Outcome != OutcomeDone || out.most() != 2 {
			t.Fatalf("outcome %s, %d out at most (want done, 2): %+v", res.Outcome, out.most(), res.Targets)
		}
	})
	return observations
}
