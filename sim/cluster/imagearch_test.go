package cluster

import (
	"context"
	"testing"

	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/utils/expression"
)

// kwok's pod-ready stage, with awaitPull, leaves a pod with a single-arch
// image to the sim until it is labelled pulled, and every other pod to kwok.
func TestAwaitPullSelectsInKwoksOwnEvaluator(t *testing.T) {
	const img = "registry.example/w:v1@sha256:00"
	stages, err := loadStages(nil, map[string]string{img: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	var ready *internalversion.Stage
	for _, st := range stages[internalversion.StageResourceRef{APIGroup: "v1", Kind: "Pod"}] {
		if st.Name == "pod-ready" {
			ready = st
		}
	}
	if ready == nil {
		t.Fatal("no pod-ready stage")
	}
	var reqs []*expression.Requirement
	for _, e := range ready.Spec.Selector.MatchExpressions {
		if e.JQ == nil {
			t.Fatal("a selector that is not jq")
		}
		r, err := expression.NewRequirement(e.JQ.Key, e.JQ.Operator, e.JQ.Values)
		if err != nil {
			t.Fatalf("%s: %v", e.JQ.Key, err)
		}
		reqs = append(reqs, r)
	}
	pod := func(image string, labels map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"labels": labels},
			"spec":   map[string]any{"containers": []any{map[string]any{"name": "c", "image": image}}},
			"status": map[string]any{"phase": "Pending"}}
	}
	for _, c := range []struct {
		name string
		pod  map[string]any
		want bool
	}{
		{"single-arch, not pulled", pod(img, map[string]any{}), false},
		{"single-arch, pulled", pod(img, map[string]any{PulledLabel: "true"}), true},
		{"another image", pod("busybox", map[string]any{}), true},
	} {
		got := true
		for _, r := range reqs {
			ok, err := r.Matches(context.Background(), c.pod)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			got = got && ok
		}
		if got != c.want {
			t.Errorf("%s: pod-ready selects it: %v, want %v", c.name, got, c.want)
		}
	}
}
