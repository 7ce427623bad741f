package tt

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A budget key no selected node carries is refused, naming the keys that
// look like it; one carried by any eligible node passes; skipped nodes do
// not count.
func TestBudgetLabelsMustBeCarried(t *testing.T) {
	node := func(name string, labels map[string]string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	nodes := []corev1.Node{
		node("a", map[string]string{"topology.kubernetes.io/zone": "z1", "example.com/rack": "r1"}),
		node("b", map[string]string{"topology.kubernetes.io/zone": "z2"}),
		node("skipped", map[string]string{"only.skipped/key": "x"}),
	}
	skip := func(n *corev1.Node) string {
		if n.Name == "skipped" {
			return "skip label"
		}
		return ""
	}
	for _, c := range []struct {
		keys          []string
		missing, like string
	}{
		{nil, "", ""},
		{[]string{"topology.kubernetes.io/zone"}, "", ""},
		{[]string{"example.com/rack"}, "", ""}, // one node carries it: it limits that node's rack
		{[]string{"topology.kubernetes.io/zon"}, "topology.kubernetes.io/zon", ""},
		{[]string{"other.io/zone", "example.com/rack"}, "other.io/zone", "topology.kubernetes.io/zone"},
		{[]string{"rack"}, "rack", "example.com/rack"},
		{[]string{"only.skipped/key"}, "only.skipped/key", ""},
	} {
		err := Selection{BudgetLabels: c.keys}.checkBudgetLabels(nodes, skip)
		var be *BudgetLabelError
		if c.missing == "" {
			if err != nil {
				t.Errorf("%v: %v", c.keys, err)
			}
			continue
		}
		if !errors.As(err, &be) || strings.Join(be.Keys, ",") != c.missing || be.Selected != 2 {
			t.Errorf("%v: %v, want %s missing of 2 selected", c.keys, err, c.missing)
			continue
		}
		if c.like != "" && !strings.Contains(err.Error(), "the selected nodes carry "+c.like) {
			t.Errorf("%v: %q does not name %s", c.keys, err, c.like)
		}
	}
}
