package tt

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// A policy selects by spec.nodeAffinity, else the older spec.nodeSelector,
// always ANDed with the NFD label; none selects every Tenstorrent node.
func TestFirmwarePolicySelector(t *testing.T) {
	tt := labels.Set{LabelPCIPresent: "true", "rack": "a"}
	other := labels.Set{LabelPCIPresent: "true", "rack": "b"}
	notTT := labels.Set{"rack": "a"}
	sel := func(k string) map[string]any {
		return map[string]any{k: map[string]any{"matchLabels": map[string]any{"rack": "a"}}}
	}
	for name, c := range map[string]struct {
		spec             map[string]any
		tt, other, notTT bool
	}{
		"nodeAffinity": {sel("nodeAffinity"), true, false, false},
		"nodeSelector": {sel("nodeSelector"), true, false, false},
		"none":         {map[string]any{}, true, true, false},
	} {
		p := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "p"}, "spec": c.spec}}
		s, why, err := firmwarePolicySelector(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Matches(tt) != c.tt || s.Matches(other) != c.other || s.Matches(notTT) != c.notTT {
			t.Errorf("%s: %s (%s) matches rack a %v, rack b %v, non-TT %v", name, s, why, s.Matches(tt), s.Matches(other), s.Matches(notTT))
		}
	}
	bad := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "p"},
		"spec": map[string]any{"nodeAffinity": map[string]any{"matchExpressions": []any{map[string]any{"key": "k", "operator": "Bogus"}}}}}}
	if _, _, err := firmwarePolicySelector(bad); err == nil {
		t.Error("an invalid selector was accepted")
	}
}
