package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

func TestFlipGuardSeesEverythingOnTheNode(t *testing.T) {
	from := []fleet.Pool{{Namespace: "ns", Name: "small"}}
	pod := func(uid string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid),
			Labels: map[string]string{fleet.PoolLabel: "small"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{fleet.VersionLabel: "v1"}}}
	drained := ateapi.Worker{Name: "u1", Namespace: "ns", Pool: "small", Node: "n1", State: ateapi.WorkerDraining}
	for _, tc := range []struct {
		name                        string
		pods                        []corev1.Pod
		workers                     []ateapi.Worker
		actors                      []ateapi.Actor
		live, hosting, unregistered int
	}{
		{"empty and drained", []corev1.Pod{pod("u1")}, []ateapi.Worker{drained}, nil, 0, 0, 0},
		{"a pod not registered yet", []corev1.Pod{pod("u1"), pod("u2")}, []ateapi.Worker{drained}, nil, 0, 0, 1},
		{"an actor the list missed, named by its worker", []corev1.Pod{pod("u1")},
			[]ateapi.Worker{{Name: "u1", Namespace: "ns", Pool: "small", Node: "n1", State: ateapi.WorkerDraining,
				Actors: []ateapi.ActorRef{{Atespace: "x", Name: "hidden"}}}}, nil, 1, 1, 0},
		{"era D: only a count", []corev1.Pod{pod("u1")},
			[]ateapi.Worker{{Name: "u1", Namespace: "ns", Pool: "small", Node: "n1", State: ateapi.WorkerDraining, AllocatedActors: 1}},
			nil, 0, 1, 0},
		{"a paused actor with its snapshot here", []corev1.Pod{pod("u1")}, []ateapi.Worker{drained},
			[]ateapi.Actor{{Atespace: "x", Name: "p", State: ateapi.ActorPaused, SnapshotNodes: []string{"n1"}}}, 1, 0, 0},
		{"a suspended actor does not live anywhere", []corev1.Pod{pod("u1")}, []ateapi.Worker{drained},
			[]ateapi.Actor{{Atespace: "x", Name: "s", State: ateapi.ActorSuspended, SnapshotNodes: []string{"n1"}}}, 0, 0, 0},
	} {
		f := nodeFacts{cfg: &Config{Sides: Sides{From: "v1", To: "v2", FromPools: from}}, node: node, pods: tc.pods,
			inv: &ateapi.Inventory{Workers: tc.workers, Actors: tc.actors}}
		ateapi.Resolve(f.inv.Workers, f.inv.Actors)
		live, _ := f.residents()
		if len(live) != tc.live || len(f.hosting()) != tc.hosting || len(f.unregistered()) != tc.unregistered {
			t.Errorf("%s: live %d hosting %d unregistered %d; want %d %d %d", tc.name,
				len(live), len(f.hosting()), len(f.unregistered()), tc.live, tc.hosting, tc.unregistered)
		}
	}
}
