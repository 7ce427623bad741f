package mutate

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A node read once and mutated after a controller changed it: the list a
// candidate shrinks may be empty by then. That is "not applicable", not a
// panic in the middle of a security test.
func TestShrinkingAListThatEmptiedIsNotApplicable(t *testing.T) {
	read := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready",
		Effect: corev1.TaintEffectNoSchedule}}}}
	var shrink *Mutation
	for _, m := range Of(read, Options{}) {
		for i, c := range m.Candidates {
			if _, ok := c.(removeItem); ok && m.Path == "spec.taints" {
				shrink = &m
				if err := m.Apply(read.DeepCopy(), i); err != nil {
					t.Fatalf("shrinking the list as read: %v", err)
				}
				now := read.DeepCopy()
				now.Spec.Taints = nil
				if err := m.Apply(now, i); !errors.Is(err, ErrNotApplicable) {
					t.Fatalf("shrinking an emptied list: got %v, want ErrNotApplicable", err)
				}
			}
		}
	}
	if shrink == nil {
		t.Fatal("no mutation shrinks spec.taints")
	}
}
