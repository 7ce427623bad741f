package roll

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
)

// Nodes flipped with no move's mark stop the roll when two or more share a
// GKE node pool (or have none): every way of being one short of that, or
// of being the roll's own move, does not.
func TestRelabelledAtOnce(t *testing.T) {
	pools := map[string]string{"a1": "pool-a", "a2": "pool-a", "b1": "pool-b", "x1": "", "x2": ""}
	c := &fleet.Cluster{Old: "v1", New: "v2"}
	var objs []corev1.Node
	for n, p := range pools {
		l := map[string]string{fleet.VersionLabel: "v2"}
		if p != "" {
			l[fleet.GKENodePoolLabel] = p
		}
		objs = append(objs, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: l}})
	}
	c.SetNodeObjects(objs, false)
	move := func(n string, unmarked bool, d node.Direction) node.HalfMoved {
		return node.HalfMoved{Node: n, Direction: d, From: "v1", To: "v2", Unmarked: unmarked}
	}
	for _, tc := range []struct {
		name  string
		moves []node.HalfMoved
		want  []string // in the error; none: no stop
		gke   fleet.GKELocation
	}{
		{"one pool's two nodes", []node.HalfMoved{move("a1", true, node.Roll), move("a2", true, node.Roll)},
			[]string{"node pool pool-a was relabelled", "a1, a2", "gcloud container node-pools update pool-a --cluster $CLUSTER " +
				"--zone $ZONE", fleet.VersionLabel + "=v1"}, fleet.GKELocation{}},
		{"one pool's two nodes, the context naming the cluster", []node.HalfMoved{move("a1", true, node.Roll), move("a2", true,
			node.Roll)}, []string{"gcloud container node-pools describe pool-a --cluster prod --zone us-central1-a --project p1",
			"gcloud container node-pools update pool-a --cluster prod --zone us-central1-a --project p1"},
			fleet.GKELocation{Project: "p1", Location: "us-central1-a", Cluster: "prod"}},
		{"two nodes of no pool", []node.HalfMoved{move("x1", true, node.Roll), move("x2", true, node.Roll)},
			[]string{"2 nodes were relabelled", "kubectl label node x1 " + fleet.VersionLabel + "=v1 --overwrite"}, fleet.GKELocation{}},
		{"one node by hand", []node.HalfMoved{move("a1", true, node.Roll)}, nil, fleet.GKELocation{}},
		{"one node in each of two pools", []node.HalfMoved{move("a1", true, node.Roll), move("b1", true, node.Roll)}, nil, fleet.GKELocation{}},
		{"one of them the roll's own move", []node.HalfMoved{move("a1", true, node.Roll), move("a2", false, node.Roll)}, nil, fleet.GKELocation{}},
		{"half-way back, not forward", []node.HalfMoved{move("a1", true, node.Rollback), move("a2", true, node.Rollback)}, nil, fleet.GKELocation{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.GKE = tc.gke
			err := RelabelledAtOnce(c, tc.moves)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("stopped: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("not stopped")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the stop lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
