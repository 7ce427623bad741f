package tt

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPerLabelBudget(t *testing.T) {
	const rack = "example.com/rack"
	g := perLabelBudget(map[string]int{rack: 1})
	if len(g) != 1 || !g[0].SharedBudget {
		t.Fatalf("want one shared-budget guard, got %+v", g)
	}
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		out    []map[string]string
		want   string // "" = passes
	}{
		{"nothing else out", map[string]string{rack: "r1"}, nil, ""},
		{"another rack is out", map[string]string{rack: "r1"}, []map[string]string{{rack: "r2"}}, ""},
		{"its rack is out", map[string]string{rack: "r1"}, []map[string]string{{rack: "r2"}, {rack: "r1"}}, "1 node(s) with " + rack + "=r1"},
		{"no rack label: not limited", nil, []map[string]string{{rack: "r1"}}, ""},
	} {
		ok, why := g[0].Check(Facts{Node: node(tc.labels), OthersOutLabels: tc.out})
		if (tc.want == "") != ok || (tc.want != "" && !strings.Contains(why, tc.want)) {
			t.Errorf("%s: ok %v, %q; want %q", tc.name, ok, why, tc.want)
		}
	}
	if err := ValidateUnavailablePer(map[string]int{rack: 0}); err == nil {
		t.Error("N=0 must be refused")
	}
	if err := ValidateUnavailablePer(map[string]int{"not a label!": 1}); err == nil {
		t.Error("a bad label key must be refused")
	}
}
