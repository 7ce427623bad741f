package campaign

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

func TestInferStatus(t *testing.T) {
	oneDS := fleettest.TwoAtelets[:1]
	old := fleettest.Pool("small", "v1", nil, nil)
	clone := fleettest.Pool("small-v2", "v2", nil, nil)
	clone.ClonedFrom = "ns/small"
	oldPod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "small-a", UID: types.UID("u1"),
		Labels: map[string]string{fleet.PoolLabel: "small"}}, Spec: corev1.PodSpec{NodeName: "n0"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	drainingOld := &ateapi.Inventory{Workers: []ateapi.Worker{
		{Name: "u1", Namespace: "ns", Pool: "small", Node: "n0", State: ateapi.WorkerDraining}}}
	goneClone := &ateapi.Inventory{Workers: []ateapi.Worker{
		{Name: "gone", Namespace: "ns", Pool: "small-v2", Node: "n0", State: ateapi.WorkerDraining}}}
	for _, tc := range []struct {
		name    string
		c       *fleet.Cluster
		pods    []corev1.Pod
		inv     *ateapi.Inventory
		phase   Phase
		pending int // nodes shown in progress
	}{
		{"not started", fleettest.Cluster(oneDS, map[string]string{"n0": "v1", "n1": "v1"}, old), []corev1.Pod{oldPod}, nil, PhaseNotStarted, 0},
		{"after a rollback: the deleted clone's worker still drains", fleettest.Cluster(oneDS, map[string]string{"n0": "v1", "n1": "v1"}, old),
			[]corev1.Pod{oldPod}, goneClone, PhaseNotStarted, 0},
		{"prepared", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v1"}, old), nil, nil, PhasePrepared, 0},
		{"cloned", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v1"}, old, clone), nil, nil, PhaseCloned, 0},
		{"a node half-way: its move recorded, its serving workers drain", marked(fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1",
			"n1": "v1"}, old, clone), "v2"), []corev1.Pod{oldPod}, drainingOld, PhaseRolling, 1},
		{"serving workers drained with no move recorded are not a move", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v1"},
			old, clone), []corev1.Pod{oldPod}, drainingOld, PhaseCloned, 0},
		{"a node moved without clones is a problem", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v2", "n1": "v1"}, old), nil, nil,
			PhaseBlocked, 0},
		{"rolling", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v2", "n1": "v1"}, old, clone), nil, nil, PhaseRolling, 0},
		{"every node moved", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v2", "n1": "v2"}, old, clone), nil, &ateapi.Inventory{
			Workers: []ateapi.Worker{{Name: "w", Namespace: "ns", Pool: "small-v2", Node: "n0", State: ateapi.WorkerActive}}},
			PhaseRetireable, 0},
		{"every node moved, the clone serving nowhere (its pods cannot run): not ready to retire",
			fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v2", "n1": "v2"}, old, clone), nil, &ateapi.Inventory{}, PhaseRolled, 0},
	} {
		s := InferStatus(tc.c, tc.pods, tc.inv)
		if s.Phase != tc.phase || len(s.Nodes) != tc.pending {
			t.Errorf("%s: phase %q (%s), %d in progress; want %q, %d", tc.name, s.Phase, s.Summary, len(s.Nodes), tc.phase, tc.pending)
		}
	}
}

// marked records on the node the drained workers are on (the first old pod's) a move to version.
func marked(c *fleet.Cluster, to string) *fleet.Cluster {
	for i := range c.Nodes {
		if c.Nodes[i].Name == "n0" {
			c.Nodes[i].MovingTo = to
		}
	}
	return c
}

// Nothing claims what it did not observe: without the control API (--no-api,
// or unreachable) the status has no count of actors on old-pool workers or of
// free new-pool workers, in its text or its JSON.
func TestStatusWithoutTheAPIClaimsNoActorCounts(t *testing.T) {
	old := fleettest.Pool("small", "v1", nil, nil)
	clone := fleettest.Pool("small-v2", "v2", nil, nil)
	clone.ClonedFrom = "ns/small"
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v2", "n1": "v2"}, old, clone)
	for _, tc := range []struct {
		inv  *ateapi.Inventory
		want string
	}{
		{nil, `"actorsOnOldPoolWorkers":null,"freeNewWorkers":null`},
		{&ateapi.Inventory{}, `"actorsOnOldPoolWorkers":0,"freeNewWorkers":0`},
	} {
		s := InferStatus(c, nil, tc.inv)
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.want) || s.ActorsRead != (tc.inv != nil) {
			t.Errorf("inventory read %v: actorsRead %v, JSON %s; want %s", tc.inv != nil, s.ActorsRead, b, tc.want)
		}
		if tc.inv == nil && (s.Phase == PhaseRetireable || strings.Contains(s.Summary, "no actor on an old-pool worker")) {
			t.Errorf("without the API: %s (%s)", s.Phase, s.Summary)
		}
	}
}
