package campaign

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

// BenchmarkInferStatus is status's pure part on a fleet the size its
// target names: 5,000 nodes (half rolled, one half-way), 10,000 workers and
// 50,000 actors. Where each node stands is decided once per node and way.
func BenchmarkInferStatus(b *testing.B) {
	const nodes, workersPerNode, actors = 5000, 2, 50000
	c := &fleet.Cluster{Atelets: fleettest.TwoAtelets, Pools: []fleet.Pool{{Namespace: "ns", Name: "p", Pin: "v1"}, {Namespace: "ns", Name: "p-v2", Pin: "v2",
		ClonedFrom: "ns/p"}}}
	for i := range nodes {
		v := "v1"
		if i < nodes/2 {
			v = "v2"
		}
		c.Nodes = append(c.Nodes, fleet.NodeInfo{Name: fmt.Sprintf("n%04d", i), Version: v})
	}
	c.Nodes[nodes/2].MovingTo = "v2"
	c.Infer()
	var pods []corev1.Pod
	inv := &ateapi.Inventory{}
	for i := range nodes {
		node := fmt.Sprintf("n%04d", i)
		pool := "p"
		if i < nodes/2 {
			pool = "p-v2"
		}
		for j := range workersPerNode {
			uid := fmt.Sprintf("%s-w%d", node, j)
			pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid),
				Labels: map[string]string{fleet.PoolLabel: pool}}, Spec: corev1.PodSpec{NodeName: node},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}})
			inv.Workers = append(inv.Workers, ateapi.Worker{Name: uid, Namespace: "ns", Pool: pool, Pod: uid, Node: node,
				State: ateapi.WorkerActive})
		}
	}
	for i := range actors {
		inv.Actors = append(inv.Actors, ateapi.Actor{Atespace: "a", Name: fmt.Sprint(i), State: ateapi.ActorSuspended})
	}
	b.ResetTimer()
	for range b.N {
		if s := InferStatus(c, pods, inv); len(s.Nodes) != 1 {
			b.Fatalf("%d node(s) in progress, want 1", len(s.Nodes))
		}
	}
}
