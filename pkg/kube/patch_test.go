package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Two steps' writes in one: the later one's value wins, a deletion is kept,
// and the node they leave is what a step's Done would see once it is in.
func TestNodeChangeWithAndAppliedTo(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"gate": "false", "keep": "1"},
		Annotations: map[string]string{"prior": "{}"}}, Spec: corev1.NodeSpec{Unschedulable: true}}
	label := NodeChange{Labels: map[string]*string{"version": ptr.To("2"), "gate": ptr.To("x")}}
	gates := NodeChange{Labels: map[string]*string{"gate": ptr.To("true")}, Annotations: map[string]*string{"prior": nil}}
	lift := NodeChange{Unschedulable: ptr.To(false)}
	c := label.With(gates).With(lift)
	if *c.Labels["gate"] != "true" || *c.Labels["version"] != "2" || c.Annotations["prior"] != nil ||
		len(c.Annotations) != 1 || c.Unschedulable == nil || *c.Unschedulable {
		t.Fatalf("merged change: %+v", c)
	}
	if len(label.Labels) != 2 || *label.Labels["gate"] != "x" {
		t.Fatalf("With changed its receiver: %+v", label)
	}
	got := c.AppliedTo(n)
	if got.Labels["gate"] != "true" || got.Labels["version"] != "2" || got.Labels["keep"] != "1" ||
		len(got.Annotations) != 0 || got.Spec.Unschedulable {
		t.Fatalf("applied: labels %v annotations %v unschedulable %v", got.Labels, got.Annotations, got.Spec.Unschedulable)
	}
	if n.Labels["gate"] != "false" || !n.Spec.Unschedulable || len(n.Annotations) != 1 {
		t.Fatalf("AppliedTo changed the node it was given: %+v", n)
	}
	if !c.NoOpOn(got) || c.NoOpOn(n) {
		t.Fatal("NoOpOn disagrees with AppliedTo")
	}
}
