package node

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

type podOpt func(*corev1.Pod)

func workerPod(uid, node string, opts ...podOpt) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid),
		Labels: map[string]string{fleet.PoolLabel: "small"}},
		Spec: corev1.PodSpec{NodeName: node, NodeSelector: map[string]string{fleet.VersionLabel: "v1"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady,
			Status: corev1.ConditionTrue}}}}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func goingAway(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
func notReady(p *corev1.Pod)  { p.Status.Conditions = nil; p.Status.Phase = corev1.PodPending }
func noRoom(p *corev1.Pod) {
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable}}
}

func recoverFixture() recoverFacts {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{fleet.VersionLabel: "v1"}}}
	w := func(name, node string, state ateapi.WorkerState) ateapi.Worker {
		return ateapi.Worker{Name: name, Namespace: "ns", Pool: "small", Pod: "pod-" + name, Node: node, State: state}
	}
	return recoverFacts{cfg: &RecoverConfig{MaxConcurrentSuspends: 2}, node: node,
		pods: []corev1.Pod{workerPod("w1", "n1"), workerPod("w2", "n1"), workerPod("w3", "n1", goingAway), workerPod("w4", "n2")},
		deps: map[string]*appsv1.Deployment{"ns/small": {Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)}}},
		inv: &ateapi.Inventory{
			Workers: []ateapi.Worker{w("w1", "n1", ateapi.WorkerDraining), w("w2", "n1", ateapi.WorkerActive),
				w("w3", "n1", ateapi.WorkerDraining), w("w4", "n2", ateapi.WorkerDraining)},
			Actors: []ateapi.Actor{
				{Atespace: "a", Name: "on-drained", State: ateapi.ActorRunning, Worker: "w1", Node: "n1"},
				{Atespace: "a", Name: "on-active", State: ateapi.ActorRunning, Worker: "w2", Node: "n1"},
				{Atespace: "a", Name: "paused-here", State: ateapi.ActorPaused, Node: "n1", SnapshotNodes: []string{"n1"}},
				{Atespace: "a", Name: "crashed-long-ago", State: ateapi.ActorCrashed, Node: "n1", AssignedNode: "n1"},
				{Atespace: "a", Name: "elsewhere", State: ateapi.ActorRunning, Worker: "w4", Node: "n2"},
			}},
	}
}

// Recovery touches only the node's drained workers whose pod still runs,
// and only the actors on them: not the node's other workers, not actors
// paused or long crashed there, not other nodes.
func TestRecoverScope(t *testing.T) {
	f := recoverFixture()
	if s := f.stale(); len(s) != 1 || s[0].Name != "w1" {
		t.Fatalf("stale = %v, want only w1 (w2 is ACTIVE, w3's pod is going, w4 is on another node)", s)
	}
	live, crashed := f.residents()
	if len(live) != 1 || live[0].Name != "on-drained" || len(crashed) != 0 {
		t.Fatalf("residents = %v / %v, want only a/on-drained", live, crashed)
	}
	if occ := f.occupied(); len(occ) != 1 || !strings.Contains(occ[0], "a/on-drained") {
		t.Fatalf("occupied = %v", occ)
	}
	// The view handed to the roll's suspend loop drains nothing more.
	if u := f.nodeView().undrained(); len(u) != 0 {
		t.Fatalf("the suspend view would drain %v", u)
	}
	// A worker that says it hosts an actor the list missed counts too.
	f.inv.Actors = f.inv.Actors[1:]
	f.inv.Workers[0].Actors = []ateapi.ActorRef{{Atespace: "a", Name: "unlisted"}}
	if live, _ := f.residents(); len(live) != 1 || live[0].Name != "unlisted" {
		t.Fatalf("residents from the worker's own assignment = %v", live)
	}
}

func TestRecoverAwaited(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*recoverFacts)
		want string // "" = nothing awaited
	}{
		{"replacement not created", func(f *recoverFacts) {}, "pool ns/small: 2 of 3 pod(s) created"},
		{"replacement with no room counts as created, not awaited", func(f *recoverFacts) {
			f.pods = append(f.pods, workerPod("w5", "", noRoom))
		}, ""},
		{"replacement not Ready", func(f *recoverFacts) { f.pods = append(f.pods, workerPod("w5", "n2", notReady)) }, "pod-w5 not Ready"},
		{"replacement not scheduled yet", func(f *recoverFacts) { f.pods = append(f.pods, workerPod("w5", "", notReady)) },
			"pod-w5 not scheduled yet"},
		{"replacement Ready, not registered", func(f *recoverFacts) { f.pods = append(f.pods, workerPod("w5", "n2")) },
			"pod-w5 not registered"},
		{"the node's own worker still DRAINING", func(f *recoverFacts) {
			f.pods = append(f.pods, workerPod("w5", "", noRoom))
			f.inv.Workers[1].State = ateapi.WorkerDraining
		}, "pod-w2 is DRAINING"},
	} {
		f := recoverFixture()
		f.pods = f.pods[1:] // w1's pod deleted: its replacement is what is awaited
		tc.edit(&f)
		got := strings.Join(f.awaited(), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: awaited %q, want %q", tc.name, got, tc.want)
		}
	}
}
