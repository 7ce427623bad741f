package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A write's response is taken once, only when newer than the node last
// observed; a late response never replaces a newer one.
func TestNodeWritesTakeOnlyTheNewest(t *testing.T) {
	node := func(rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: rv}}
	}
	var w NodeWrites
	w.put("n1", node("12"), nil)
	w.put("n1", node("11"), nil) // late
	if got := w.Newest(node("10")); got.ResourceVersion != "12" {
		t.Fatalf("newest %s, want 12", got.ResourceVersion)
	}
	if got := w.Take("n1"); got == nil || got.ResourceVersion != "12" {
		t.Fatalf("take %v, want 12", got)
	}
	if got := w.Take("n1"); got != nil {
		t.Fatalf("taken twice: %v", got)
	}
	w.Observed(node("20"))
	w.put("n1", node("15"), nil) // older than what was observed since
	if got := w.Take("n1"); got != nil {
		t.Fatalf("took %s, older than the node observed (20)", got.ResourceVersion)
	}
	w.put("n1", node("21"), nil)
	w.put("n1", nil, context.Canceled) // outcome unknown: forget
	if got := w.Take("n1"); got != nil {
		t.Fatalf("took %s after a failed write", got.ResourceVersion)
	}
}
