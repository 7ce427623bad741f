package runbook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/kube"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3}) }

// A small runbook over real nodes, shaped like the real ones: cordon, two
// label changes, uncordon. Done is derived from the node alone.
type nodeFacts struct {
	node   *corev1.Node
	target string
}

const (
	testLabel = "rollbook-test.dev/version"
	prepLabel = "rollbook-test.dev/prepared"
)

type counters struct {
	mu   sync.Mutex
	acts map[string]int
}

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

// testRunbook builds the runbook; afterAct runs after each successful Act
// (tests use it to interrupt the run at an exact point).
func testRunbook(cs kubernetes.Interface, version string, cnt *counters, afterAct func(stepID string)) *Runbook[nodeFacts] {
	rec := kube.NopRecorder{}
	finished := func(f nodeFacts) bool { return f.node.Labels[testLabel] == f.target }
	ourCordon := func(f nodeFacts) bool { return kube.CordonStateOf(f.node).Owner == "test-roll" }
	wrap := func(id string, act func(ctx context.Context, f nodeFacts) error) func(ctx context.Context, f nodeFacts) error {
		return func(ctx context.Context, f nodeFacts) error {
			if err := act(ctx, f); err != nil {
				return err
			}
			cnt.inc(id)
			if afterAct != nil {
				afterAct(id)
			}
			return nil
		}
	}
	setLabel := func(key, val string) func(ctx context.Context, f nodeFacts) error {
		return func(ctx context.Context, f nodeFacts) error {
			_, err := kube.UpdateNode(ctx, cs, f.node.Name, func(*corev1.Node) (kube.NodeChange, error) {
				return kube.NodeChange{Labels: map[string]*string{key: &val}}, nil
			})
			return err
		}
	}
	return &Runbook[nodeFacts]{
		Name:  "test-roll",
		Title: "Test roll",
		Doc:   "A runbook used to test the engine.",
		Observe: func(ctx context.Context, t Target) (nodeFacts, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, strings.TrimPrefix(t.Name(), "node/"), metav1.GetOptions{})
			return nodeFacts{node: n, target: version}, err
		},
		Notes: func(f nodeFacts) []string {
			if ourCordon(f) {
				return []string{"node is cordoned by rollbook test-roll; re-run to continue"}
			}
			return nil
		},
		Steps: []Step[nodeFacts]{
			{
				ID: "test.cordon", Title: "Cordon", Doc: "Cordon the node.",
				Done: func(f nodeFacts) (bool, string) {
					return ourCordon(f) || finished(f), kube.CordonStateOf(f.node).String()
				},
				Guards: []Guard[nodeFacts]{{Name: "no foreign cordon", Check: func(f nodeFacts) (bool, string) {
					st := kube.CordonStateOf(f.node)
					return !st.Foreign(), "the node was cordoned by someone else"
				}}},
				Plan: func(f nodeFacts) []Change {
					return []Change{{Object: "node/" + f.node.Name, Action: "cordon"}}
				},
				Act: wrap("test.cordon", func(ctx context.Context, f nodeFacts) error {
					_, err := kube.Cordon(ctx, cs, rec, f.node.Name, "test-roll", "run")
					return err
				}),
			},
			{
				ID: "test.prepare", Title: "Prepare", Doc: "Mark the node prepared.",
				Done: func(f nodeFacts) (bool, string) {
					return f.node.Labels[prepLabel] == f.target || finished(f), "prepared=" + f.node.Labels[prepLabel]
				},
				Act:     wrap("test.prepare", setLabel(prepLabel, version)),
				Timeout: time.Minute,
			},
			{
				ID: "test.upgrade", Title: "Upgrade", Doc: "Label the node with the new version.",
				Done: func(f nodeFacts) (bool, string) { return finished(f), "version=" + f.node.Labels[testLabel] },
				Guards: []Guard[nodeFacts]{{Name: "node cordoned by this runbook", Check: func(f nodeFacts) (bool, string) {
					return ourCordon(f), "the node is not cordoned by test-roll"
				}}},
				Act: wrap("test.upgrade", setLabel(testLabel, version)),
			},
			{
				ID: "test.uncordon", Title: "Uncordon", Doc: "Uncordon the node.",
				Done: func(f nodeFacts) (bool, string) {
					return finished(f) && !ourCordon(f), kube.CordonStateOf(f.node).String()
				},
				Act: wrap("test.uncordon", func(ctx context.Context, f nodeFacts) error {
					_, err := kube.Uncordon(ctx, cs, rec, f.node.Name, "test-roll")
					return err
				}),
			},
		},
	}
}

func nodeTargets(cs kubernetes.Interface, names ...string) []Target {
	var ts []Target
	for _, n := range names {
		ts = append(ts, NodeTarget{Client: cs, Node: n})
	}
	return ts
}

func resetNodes(t *testing.T, cs kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := kube.UpdateNode(context.Background(), cs, n, func(*corev1.Node) (kube.NodeChange, error) {
			f := false
			return kube.NodeChange{Unschedulable: &f,
				Labels:      map[string]*string{testLabel: nil, prepLabel: nil},
				Annotations: map[string]*string{kube.AnnCordonedBy: nil, kube.AnnCordonedAt: nil, kube.AnnCordonRun: nil, timerKey("test-roll"): nil}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

var allNodes = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"}

func TestRunCompletesAndIsIdempotent(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	resetNodes(t, c.Client, allNodes...)
	t.Cleanup(func() { resetNodes(t, c.Client, allNodes...) })
	cnt := &counters{acts: map[string]int{}}
	rb := testRunbook(c.Client, "v2", cnt, nil)

	res := Run(ctx, rb, nodeTargets(c.Client, allNodes...), Options{RunID: "r1"})
	if res.Outcome != OutcomeDone {
		t.Fatalf("outcome %s: %+v", res.Outcome, res)
	}
	for _, s := range rb.Steps {
		if got := cnt.get(s.ID); got != 3 {
			t.Errorf("step %s acted %d times for 3 nodes", s.ID, got)
		}
	}
	for _, n := range allNodes {
		node, _ := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if node.Labels[testLabel] != "v2" || node.Spec.Unschedulable || node.Annotations[timerKey("test-roll")] != "" {
			t.Errorf("%s not finished cleanly: labels %v unschedulable %v annotations %v", n, node.Labels, node.Spec.Unschedulable, node.Annotations)
		}
	}
	// A second run observes everything done and changes nothing.
	res = Run(ctx, rb, nodeTargets(c.Client, allNodes...), Options{RunID: "r2"})
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
	c := simtest.Get(t)
	const node = "kwok-node-1"
	steps := testRunbook(c.Client, "v3", &counters{}, nil).Steps
	for _, stop := range steps {
		t.Run(stop.ID, func(t *testing.T) {
			resetNodes(t, c.Client, node)
			t.Cleanup(func() { resetNodes(t, c.Client, node) })
			cnt := &counters{acts: map[string]int{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rb := testRunbook(c.Client, "v3", cnt, func(id string) {
				if id == stop.ID {
					cancel()
				}
			})
			res := Run(ctx, rb, nodeTargets(c.Client, node), Options{RunID: "first"})
			if res.Outcome != OutcomeInterrupted && stop.ID != steps[len(steps)-1].ID {
				t.Fatalf("first run: outcome %s, want interrupted", res.Outcome)
			}
			rb2 := testRunbook(c.Client, "v3", cnt, nil)
			res = Run(simtest.Context(t, time.Minute), rb2, nodeTargets(c.Client, node), Options{RunID: "second"})
			if res.Outcome != OutcomeDone {
				t.Fatalf("resumed run: outcome %s %+v", res.Outcome, res.Targets)
			}
			for _, s := range rb2.Steps {
				if got := cnt.get(s.ID); got != 1 {
					t.Errorf("step %s acted %d times across the interrupted and the resumed run; want exactly once", s.ID, got)
				}
			}
		})
	}
}

func TestGuardBlocksAndNotesExplain(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	const node = "kwok-node-2"
	resetNodes(t, c.Client, node)
	t.Cleanup(func() { resetNodes(t, c.Client, node) })
	// Someone else cordoned the node: the runbook must not take it over.
	if _, err := kube.UpdateNode(ctx, c.Client, node, func(*corev1.Node) (kube.NodeChange, error) {
		tr := true
		return kube.NodeChange{Unschedulable: &tr}, nil
	}); err != nil {
		t.Fatal(err)
	}
	cnt := &counters{acts: map[string]int{}}
	res := Run(ctx, testRunbook(c.Client, "v4", cnt, nil), nodeTargets(c.Client, node), Options{})
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
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	resetNodes(t, c.Client, allNodes...)
	t.Cleanup(func() { resetNodes(t, c.Client, allNodes...) })
	cnt := &counters{acts: map[string]int{}}
	rb := testRunbook(c.Client, "v5", cnt, nil)
	boom := errors.New("helper failed")
	rb.Steps[1].Act = func(context.Context, nodeFacts) error { return boom }
	res := Run(ctx, rb, nodeTargets(c.Client, allNodes...), Options{})
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

func TestDryRunChangesNothing(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	resetNodes(t, c.Client, allNodes...)
	t.Cleanup(func() { resetNodes(t, c.Client, allNodes...) })
	// kwok heartbeats bump every node's resourceVersion and the taint
	// controller edits taints, so compare what a run could touch.
	snapshot := func() string {
		var b strings.Builder
		for _, n := range allNodes {
			node, _ := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			fmt.Fprintf(&b, "%s %v %v %v|", n, node.Labels, node.Annotations, node.Spec.Unschedulable)
		}
		return b.String()
	}
	want := snapshot()
	cnt := &counters{acts: map[string]int{}}
	res := Run(ctx, testRunbook(c.Client, "v6", cnt, nil), nodeTargets(c.Client, allNodes...), Options{DryRun: true})
	if res.Outcome != OutcomePlanned {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if got := snapshot(); got != want {
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
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	const node = "kwok-node-0"
	resetNodes(t, c.Client, node)
	t.Cleanup(func() { resetNodes(t, c.Client, node) })
	target := NodeTarget{Client: c.Client, Node: node}
	// An earlier run started the step 50 s ago.
	earlier := time.Now().Add(-50 * time.Second).UTC()
	v := "test.prepare@" + earlier.Format(time.RFC3339)
	if err := target.SetAnnotation(ctx, timerKey("test-roll"), &v); err != nil {
		t.Fatal(err)
	}
	started, err := startClock(ctx, target, target.Annotation, "test-roll", "test.prepare", time.Now())
	if err != nil || !started.Equal(earlier.Truncate(time.Second)) {
		t.Fatalf("clock restarted: got %v, want %v (%v)", started, earlier, err)
	}
	// A different step starts a fresh clock.
	now := time.Now()
	started, err = startClock(ctx, target, target.Annotation, "test-roll", "test.upgrade", now)
	if err != nil || started.Before(now.Add(-time.Second)) {
		t.Fatalf("new step reused an old clock: %v %v", started, err)
	}

	// A step whose stored budget is already spent fails with the budget
	// named, even though this run only just started.
	spent := "test.prepare@" + time.Now().Add(-2*time.Minute).UTC().Format(time.RFC3339)
	if err := target.SetAnnotation(ctx, timerKey("test-roll"), &spent); err != nil {
		t.Fatal(err)
	}
	rb := testRunbook(c.Client, "v7", &counters{acts: map[string]int{}}, nil)
	rb.Steps[1].Wait = func(ctx context.Context, _ nodeFacts) error { <-ctx.Done(); return ctx.Err() }
	res := Run(ctx, rb, []Target{target}, Options{})
	step := res.Targets[0].Steps[1]
	if res.Outcome != OutcomeFailed || !strings.Contains(step.Error, "budget") {
		t.Fatalf("want a failed step naming its spent budget, got %s: %+v", res.Outcome, step)
	}
}

func TestMarkdownListsEveryStep(t *testing.T) {
	rb := testRunbook(nil, "v", &counters{}, nil)
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
