package kube

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/cutoff"
	"github.com/rollbook/rollbook/internal/recordtest"
	"github.com/rollbook/rollbook/internal/simtest"
)

// A node write (cordon, uncordon, label) the server applied while the run
// was being interrupted, or whose answer was lost on the way back while the
// run went on, is still recorded: the run (or the next) carries on from the
// node as it is, but only this one knew it had made the change.
func TestNodeWriteInterruptedMidRequestStillRecordsWhatHappened(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := "interrupted"
		if lost {
			name = "answer lost"
		}
		t.Run(name, func(t *testing.T) { nodeWriteCutShort(t, lost) })
	}
}

func nodeWriteCutShort(t *testing.T, lost bool) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	const node, owner, testLabel = "kwok-node-3", "test-interrupt", "test.rollbook.dev/interrupted"
	steps := []struct {
		reason string
		write  func(context.Context, kubernetes.Interface, Recorder, *corev1.Node) error
		done   func(*corev1.Node) bool
	}{
		{"Cordoned", func(ctx context.Context, cs kubernetes.Interface, rec Recorder, n *corev1.Node) error {
			_, err := CordonNode(ctx, cs, rec, n, owner, "run-1")
			return err
		}, func(n *corev1.Node) bool { s := CordonStateOf(n); return s.Cordoned && s.Owner == owner }},
		{"Uncordoned", func(ctx context.Context, cs kubernetes.Interface, rec Recorder, n *corev1.Node) error {
			_, err := UncordonNode(ctx, cs, rec, n, owner)
			return err
		}, func(n *corev1.Node) bool { return !n.Spec.Unschedulable }},
		{"Labelled", func(ctx context.Context, cs kubernetes.Interface, rec Recorder, n *corev1.Node) error {
			_, err := SetNodeKeysRecorded(ctx, cs, rec, n.Name, NodeChange{Labels: map[string]*string{testLabel: ptr.To("1")}},
				"Labelled", "test label set")
			return err
		}, func(n *corev1.Node) bool { return n.Labels[testLabel] == "1" }},
		// One patch standing for two steps' writes records both.
		{"Relabelled", func(ctx context.Context, cs kubernetes.Interface, rec Recorder, n *corev1.Node) error {
			reads := &NodeKeys{Unschedulable: true}
			_, err := UpdateNodeRecorded(ctx, cs, rec, n, reads, func(n *corev1.Node) (NodeChange, []NodeRecord) {
				change, _ := CordonChange(n, owner, "run-2")
				return change.With(NodeChange{Labels: map[string]*string{testLabel: ptr.To("2")}}),
					[]NodeRecord{{Reason: "Relabelled", Message: "label"}, {Reason: "Cordoned", Message: "cordon"}}
			})
			return err
		}, func(n *corev1.Node) bool { return n.Labels[testLabel] == "2" && CordonedBy(n, owner, "run-2") }},
	}
	defer func() {
		_, _ = SetNodeKeys(context.Background(), c.Client, node, NodeChange{Labels: map[string]*string{testLabel: nil},
			Annotations: clearCordonAnnotations(), Unschedulable: ptr.To(false)})
	}()
	for _, s := range steps {
		runCtx, stop := context.WithCancel(ctx)
		cfg := cutoff.Config(c.RESTConfig, cutoff.Method(http.MethodPatch, "/nodes/"+node), stop)
		if lost {
			cfg = cutoff.LoseAnswer(c.RESTConfig, cutoff.Method(http.MethodPatch, "/nodes/"+node))
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec := &recordtest.Recorder{}
		if err := s.write(runCtx, cs, rec, n); err == nil {
			t.Fatalf("%s: an interrupted write should report its error", s.reason)
		}
		if n, err = c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if !s.done(n) {
			t.Fatalf("%s: the server did not apply the write", s.reason)
		}
		if got := rec.Count(s.reason); got != 1 {
			t.Errorf("%d %s records for a write the server applied, want 1", got, s.reason)
		}
		if s.reason == "Relabelled" && rec.Count("Cordoned") != 1 {
			t.Errorf("%d Cordoned records for the cordon carried in the same write, want 1", rec.Count("Cordoned"))
		}
	}
}
