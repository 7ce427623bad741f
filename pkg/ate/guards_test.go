package ate

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
		if ok != tc.ok || !strings.Contains(describeNeeds(needs), tc.want) {
			t.Errorf("%s: ok=%v %q; want ok=%v containing %q", tc.name, ok, describeNeeds(needs), tc.ok, tc.want)
		}
	}
}

func TestRollPreconditions(t *testing.T) {
	old := wp("small", "v1", nil, nil)
	clone := wp("small-v2", "v2", nil, nil)
	clone.ClonedFrom = "ns/small"
	unpinned := wp("scratch", "", nil, nil)
	nodes := map[string]string{"n0": "v1", "n1": "v1"}
	deps := PoolDeployments{Count: map[string]int{"ns/small": 1, "ns/small-v2": 1}}
	quota := PoolDeployments{Count: deps.Count, Failure: map[string]string{"ns/small-v2": "Deployment ns/small-v2: FailedCreate: " +
		"pods \"small-v2-x\" is forbidden: exceeded quota: workers"}}
	for _, tc := range []struct {
		name  string
		c     *Cluster
		deps  PoolDeployments
		full  bool
		fails string // "" = all pass
	}{
		{"ready", cluster(twoDS, nodes, old, clone), deps, false, ""},
		{"no NEW atelet", cluster(twoDS[:1], nodes, old), deps, false, "two atelet DaemonSets"},
		{"no clone", cluster(twoDS, nodes, old), deps, false, "has a clone pinned to NEW"},
		{"one pool without a clone", cluster(twoDS, nodes, old, clone, wp("large", "v1", nil, nil)), deps, false, "no clone: ns/large"},
		{"an unpinned serving pool", cluster(twoDS, nodes, old, clone, unpinned), deps, false, "pinned to OLD"},
		{"clone without Deployment", cluster(twoDS, nodes, old, clone), PoolDeployments{Count: map[string]int{"ns/small": 1}}, false,
			"every clone has its Deployment"},
		{"a clone whose pods a ResourceQuota refuses", cluster(twoDS, nodes, old, clone), quota, false, "exceeded quota"},
		{"single node", cluster(twoDS, map[string]string{"n0": "v1"}, old, clone), deps, false, "more than one node"},
		{"single node, full stop accepted", cluster(twoDS, map[string]string{"n0": "v1"}, old, clone), deps, true, ""},
	} {
		got := FailedChecks(RollPreconditions(tc.c, tc.deps, tc.full))
		if (tc.fails == "") != (got == "") || !strings.Contains(got, tc.fails) {
			t.Errorf("%s: failed %q, want %q", tc.name, got, tc.fails)
		}
	}
}

func TestImagesPerSandboxClass(t *testing.T) {
	ref := func(c string) string { return "reg.io/ateom-" + c + "@sha256:" + strings.Repeat("a", 64) }
	for _, tc := range []struct {
		flags   []string
		classes []string
		class   string
		want    string // "" = error
		bad     bool   // refused when parsed
	}{
		{[]string{"gvisor=" + ref("gvisor"), "microvm=" + ref("microvm")}, []string{"gvisor", "microvm"}, "microvm", ref("microvm"), false},
		{[]string{ref("gvisor")}, []string{"gvisor"}, "gvisor", ref("gvisor"), false},
		{[]string{ref("gvisor")}, []string{"gvisor", "microvm"}, "microvm", "", false},
		{[]string{"gvisor=" + ref("gvisor")}, []string{"gvisor", "microvm"}, "microvm", "", false},
		{[]string{"gvisor=reg.io/ateom:v2"}, nil, "", "", true},
		{[]string{"gvisor=" + ref("a"), "gvisor=" + ref("b")}, nil, "", "", true},
		{[]string{ref("a"), ref("b")}, nil, "", "", true},
		{[]string{"Bad_Class=" + ref("a")}, nil, "", "", true},
	} {
		im, err := ParseImages(tc.flags)
		if (err != nil) != tc.bad {
			t.Errorf("ParseImages(%v): %v", tc.flags, err)
			continue
		}
		if tc.bad {
			continue
		}
		classes := map[string]bool{}
		for _, c := range tc.classes {
			classes[c] = true
		}
		got, err := im.For(tc.class, classes)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("%v For(%s) = %q, %v; want %q", tc.flags, tc.class, got, err, tc.want)
		}
	}
}

func TestFlipGuardSeesEverythingOnTheNode(t *testing.T) {
	from := []Pool{{Namespace: "ns", Name: "small"}}
	pod := func(uid string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid),
			Labels: map[string]string{PoolLabel: "small"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{VersionLabel: "v1"}}}
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
		f := nodeFacts{cfg: &NodeConfig{Sides: Sides{From: "v1", To: "v2", FromPools: from}}, node: node, pods: tc.pods,
			inv: &ateapi.Inventory{Workers: tc.workers, Actors: tc.actors}}
		ateapi.Resolve(f.inv.Workers, f.inv.Actors)
		live, _ := f.residents()
		if len(live) != tc.live || len(f.hosting()) != tc.hosting || len(f.unregistered()) != tc.unregistered {
			t.Errorf("%s: live %d hosting %d unregistered %d; want %d %d %d", tc.name,
				len(live), len(f.hosting()), len(f.unregistered()), tc.live, tc.hosting, tc.unregistered)
		}
	}
}
