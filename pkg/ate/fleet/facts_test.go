package fleet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/pkg/ateapi"
)

func TestCapacityPerLineage(t *testing.T) {
	lineage := map[string]string{"a/small": "a/small", "a/small-v2": "a/small", "b/small": "b/small", "b/small-v2": "b/small"}
	w := func(name, ns, pool, node string, actors int) ateapi.Worker {
		x := ateapi.Worker{Name: name, Namespace: ns, Pool: pool, Node: node, State: ateapi.WorkerActive}
		for range actors {
			x.Actors = append(x.Actors, ateapi.ActorRef{Atespace: "x", Name: name})
		}
		return x
	}
	bound := func(worker string) ateapi.Actor {
		return ateapi.Actor{Atespace: "x", Name: "on-" + worker, Worker: worker}
	}
	paused := ateapi.Actor{Atespace: "x", Name: "p", State: ateapi.ActorPaused}
	// d is an era D worker: capacity and allocation counted in actor slots
	// (capacity 0: its ateom has not reported yet).
	d := func(name, ns, pool, node string, capacity, allocated int) ateapi.Worker {
		x := w(name, ns, pool, node, 0)
		x.Slots, x.CapacityActors, x.AllocatedActors = true, capacity, allocated
		return x
	}
	for _, tc := range []struct {
		name      string
		workers   []ateapi.Worker
		residents []ateapi.Actor
		ok        bool
		want      string
	}{
		{"nothing to suspend", []ateapi.Worker{w("w1", "a", "small", "n1", 1)}, nil, true, ""},
		{"a free clone worker elsewhere", []ateapi.Worker{w("w1", "a", "small", "n1", 1), w("w2", "a", "small-v2", "n2", 0)},
			[]ateapi.Actor{bound("w1")}, true, "pool a/small or its clone: 1 actor(s) to suspend, 1 free"},
		{"free workers only in the other namespace's lineage",
			[]ateapi.Worker{w("w1", "a", "small", "n1", 1), w("w2", "b", "small-v2", "n2", 0)},
			[]ateapi.Actor{bound("w1")}, false, "a/small or its clone: 1 actor(s) to suspend, 0 free"},
		{"free worker on the node itself does not count", []ateapi.Worker{w("w1", "a", "small", "n1", 1), w("w2", "a", "small", "n1", 0)},
			[]ateapi.Actor{bound("w1")}, false, "0 free"},
		{"two actors, one free worker", []ateapi.Worker{w("w1", "a", "small", "n1", 1), w("w3", "a", "small", "n1", 1),
			w("w2", "a", "small-v2", "n2", 0)}, []ateapi.Actor{bound("w1"), bound("w3")}, false, "2 actor(s) to suspend, 1 free"},
		{"paused actors weigh on every lineage", []ateapi.Worker{w("w2", "b", "small-v2", "n2", 0)},
			[]ateapi.Actor{paused}, true, "any pool (paused actors): 1 actor(s) to suspend, 1 free"},
		{"paused actors and bound ones share the free workers", []ateapi.Worker{w("w1", "b", "small", "n1", 1), w("w2", "b", "small-v2",
			"n2", 0)},
			[]ateapi.Actor{paused, bound("w1")}, false, ""},
		{"era D: a multi-actor worker elsewhere takes as many actors as it has free slots",
			[]ateapi.Worker{d("w1", "a", "small", "n1", 4, 3), d("w2", "a", "small-v2", "n2", 4, 1)},
			[]ateapi.Actor{bound("w1"), bound("w1"), bound("w1")}, true, "3 actor(s) to suspend, 3 free"},
		{"era D: slots, not workers: one free worker with one slot left is not room for two",
			[]ateapi.Worker{d("w1", "a", "small", "n1", 4, 2), d("w2", "a", "small-v2", "n2", 4, 3)},
			[]ateapi.Actor{bound("w1"), bound("w1")}, false, "2 actor(s) to suspend, 1 free"},
		{"era D: a worker whose capacity is not reported yet is not serving",
			[]ateapi.Worker{d("w1", "a", "small", "n1", 2, 1), d("w2", "a", "small-v2", "n2", 0, 0)},
			[]ateapi.Actor{bound("w1")}, false, "1 actor(s) to suspend, 0 free"},
		{"era D: paused actors weigh on every lineage's free slots",
			[]ateapi.Worker{d("w2", "b", "small-v2", "n2", 3, 0)},
			[]ateapi.Actor{paused, paused, paused}, true, "any pool (paused actors): 3 actor(s) to suspend, 3 free"},
	} {
		inv := &ateapi.Inventory{Workers: tc.workers}
		needs, ok := Capacity(inv, lineage, "n1", tc.residents)
		if ok != tc.ok || !strings.Contains(DescribeNeeds(needs), tc.want) {
			t.Errorf("%s: ok=%v %q; want ok=%v containing %q", tc.name, ok, DescribeNeeds(needs), tc.ok, tc.want)
		}
	}
}

func TestMarkDown(t *testing.T) {
	now := metav1.Now()
	pod := func(uid string, phase corev1.PodPhase, ready bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, UID: types.UID(uid)}, Status: corev1.PodStatus{Phase: phase}}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return p
	}
	deleting := pod("gone", corev1.PodRunning, true)
	deleting.DeletionTimestamp = &now
	evicted := pod("evicted", corev1.PodFailed, false)
	evicted.Status.Reason = "Evicted"
	pods := []corev1.Pod{pod("ok", corev1.PodRunning, true), pod("unready", corev1.PodRunning, false), deleting, evicted,
		pod("down", corev1.PodRunning, true)}
	inv := &ateapi.Inventory{}
	for _, uid := range []string{"ok", "unready", "gone", "evicted", "down", "unlisted"} {
		node := "n1"
		if uid == "down" {
			node = "n2"
		}
		inv.Workers = append(inv.Workers, ateapi.Worker{Name: uid, Namespace: "ns", Pool: "p", Node: node, State: ateapi.WorkerActive})
	}
	MarkDown(inv, pods, map[string]string{"n2": "KubeletNotReady"})
	want := map[string]string{"ok": "", "unready": "pod p-unready not Ready", "gone": "pod p-gone Terminating",
		"evicted": "pod p-evicted Failed (Evicted)", "down": "node n2 NotReady (KubeletNotReady)", "unlisted": ""}
	for _, w := range inv.Workers {
		if w.Down != want[w.Name] {
			t.Errorf("%s: %q, want %q", w.Name, w.Down, want[w.Name])
		}
		if (w.Down == "") != w.Serving() || (w.Down == "") != (w.FreeSlots() == 1) {
			t.Errorf("%s: serving %v, free %d with down %q", w.Name, w.Serving(), w.FreeSlots(), w.Down)
		}
	}
	if got := FreeWorkers(inv, []Pool{{Namespace: "ns", Name: "p"}}, nil); got != 2 {
		t.Errorf("free workers %d, want 2 (ok and unlisted)", got)
	}
}

// A pod the pick listed Pending (a clone's, before any node was at NEW)
// and the node's run later sees Running and Ready there serves: the run's
// own read of the node wins over the pick's list, for that node only.
func TestWithNodePodsPrefersTheLaterRead(t *testing.T) {
	pod := func(uid, node string, phase corev1.PodPhase) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: phase}}
		if phase == corev1.PodRunning {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return p
	}
	picked := []corev1.Pod{pod("clone", "", corev1.PodPending), pod("old", "n1", corev1.PodRunning),
		pod("elsewhere", "n2", corev1.PodPending)}
	later := []corev1.Pod{pod("clone", "n1", corev1.PodRunning)}
	inv := &ateapi.Inventory{}
	for _, w := range []struct{ uid, node string }{{"clone", "n1"}, {"old", "n1"}, {"elsewhere", "n2"}} {
		inv.Workers = append(inv.Workers, ateapi.Worker{Name: w.uid, Namespace: "ns", Pool: "p", Node: w.node,
			State: ateapi.WorkerActive})
	}
	MarkDown(inv, WithNodePods(picked, "n1", later), nil)
	want := map[string]string{"clone": "", "old": "", "elsewhere": "pod p-elsewhere Pending"}
	for _, w := range inv.Workers {
		if w.Down != want[w.Name] {
			t.Errorf("%s: %q, want %q", w.Name, w.Down, want[w.Name])
		}
	}
	// Without the later read the clone's worker was down: what the e2e saw.
	inv.Workers[0].Down = ""
	MarkDown(inv, picked, nil)
	if inv.Workers[0].Down == "" {
		t.Error("the pick's list alone should mark the clone's worker down (the test's premise)")
	}
}
