package kubewatch

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/sim/substrate"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func lease(holder string, renewedAgo time.Duration, max string) *coordv1.Lease {
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "rollbook-tt"}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	l.Spec.LeaseDurationSeconds = ptr.To[int32](30)
	l.Spec.RenewTime = &metav1.MicroTime{Time: t0.Add(-renewedAgo)}
	if max != "" {
		l.Annotations = map[string]string{AnnMaxOutOfService: max}
	}
	return l
}

type nodeOpt func(*corev1.Node)

func cordonedBy(owner string) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		if owner != "" {
			n.Annotations[AnnCordonedBy] = owner
		}
	}
}
func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }
func leftCordoned(r string) nodeOpt {
	return func(n *corev1.Node) { n.Annotations[AnnLeftCordoned] = r }
}
func version(v string) nodeOpt                { return func(n *corev1.Node) { n.Labels[substrate.VersionLabel] = v } }
func deleting(n *corev1.Node)                 { n.DeletionTimestamp = &metav1.Time{Time: t0} }
func nodes(ns ...*corev1.Node) []*corev1.Node { return ns }

func node(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}, Labels: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func TestLeaseHeldAndAllowance(t *testing.T) {
	released := lease("", 0, "")
	noRenew := lease("run", 0, "")
	noRenew.Spec.RenewTime = nil
	noRenew.Spec.AcquireTime = &metav1.MicroTime{Time: t0.Add(-time.Minute)}
	for _, tc := range []struct {
		name  string
		l     *coordv1.Lease
		held  bool
		allow int
	}{
		{"fresh", lease("run", time.Second, ""), true, 1},
		{"expired", lease("run", 31*time.Second, "3"), false, 3},
		{"released", released, false, 1},
		{"acquired long ago, never renewed", noRenew, false, 1},
		{"annotation 2", lease("run", 0, "2"), true, 2},
		{"annotation garbage", lease("run", 0, "two"), true, 1},
		{"annotation zero", lease("run", 0, "0"), true, 1},
	} {
		if got := leaseHeld(tc.l, t0); got != tc.held {
			t.Errorf("%s: held %v, want %v", tc.name, got, tc.held)
		}
		if got := allowance(tc.l); got != tc.allow {
			t.Errorf("%s: allowance %d, want %d", tc.name, got, tc.allow)
		}
	}
}

func TestTooManyOut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  []*corev1.Node
		leases []*coordv1.Lease
		out    int
		bad    bool
	}{
		{"no lease: never checked", nodes(node("a", cordonedBy("tt-kmd")), node("b", cordonedBy("tt-kmd"))), nil, 0, false},
		{"expired lease: not checked", nodes(node("a", cordonedBy("x")), node("b", cordonedBy("x"))),
			[]*coordv1.Lease{lease("r", time.Hour, "")}, 0, false},
		{"one of one", nodes(node("a", cordonedBy("tt-kmd")), node("b")), []*coordv1.Lease{lease("r", 0, "")}, 1, false},
		{"two, default 1", nodes(node("a", cordonedBy("tt-kmd")), node("b", cordonedBy("tt-kmd"))),
			[]*coordv1.Lease{lease("r", 0, "")}, 2, true},
		{"two, allowed 2", nodes(node("a", cordonedBy("tt-kmd")), node("b", cordonedBy("tt-kmd"))),
			[]*coordv1.Lease{lease("r", 0, "2")}, 2, false},
		{"foreign cordon does not count", nodes(node("a", cordonedBy("")), node("b", cordonedBy("tt-kmd"))),
			[]*coordv1.Lease{lease("r", 0, "")}, 1, false},
		{"foreign cordon NotReady does not count", nodes(node("a", cordonedBy(""), notReady), node("b", cordonedBy("tt-kmd"))),
			[]*coordv1.Lease{lease("r", 0, "")}, 1, false},
		{"NotReady counts", nodes(node("a", notReady), node("b", cordonedBy("tt-kmd"))), []*coordv1.Lease{lease("r", 0, "")}, 2, true},
		{"two leases add up", nodes(node("a", cordonedBy("tt-kmd")), node("b", cordonedBy("ate"))),
			[]*coordv1.Lease{lease("r", 0, ""), lease("s", 0, "")}, 2, false},
	} {
		out, detail := tooManyOut(tc.nodes, tc.leases, t0)
		if len(out) != tc.out || (detail != "") != tc.bad {
			t.Errorf("%s: out %v, detail %q; want %d out, violation %v", tc.name, out, detail, tc.out, tc.bad)
		}
	}
}

func TestCordonsLeft(t *testing.T) {
	held := []*coordv1.Lease{lease("r", 0, "")}
	for _, tc := range []struct {
		name   string
		n      *corev1.Node
		leases []*coordv1.Lease
		left   bool
	}{
		{"rollbook cordon, no lease", node("a", cordonedBy("tt-kmd")), nil, true},
		{"rollbook cordon, released lease", node("a", cordonedBy("tt-kmd")), []*coordv1.Lease{lease("", 0, "")}, true},
		{"rollbook cordon, expired lease", node("a", cordonedBy("tt-kmd")), []*coordv1.Lease{lease("r", time.Minute, "")}, true},
		{"rollbook cordon, run in progress", node("a", cordonedBy("tt-kmd")), held, false},
		{"left on purpose", node("a", cordonedBy("tt-kmd"), leftCordoned("flash failed")), nil, false},
		{"blank reason is no reason", node("a", cordonedBy("tt-kmd"), leftCordoned(" ")), nil, true},
		{"foreign cordon", node("a", cordonedBy("")), nil, false},
		{"annotation but schedulable", node("a", func(n *corev1.Node) { n.Annotations[AnnCordonedBy] = "x" }), nil, false},
	} {
		got := cordonsLeft(nodes(tc.n), tc.leases, t0)
		if _, ok := got["a"]; ok != tc.left {
			t.Errorf("%s: left %v, want %v", tc.name, got, tc.left)
		}
	}
}

func pod(ns, name, nodeName string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: nodeName}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func worker(pool, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Labels[substrate.PoolLabel] = pool
		if v != "" {
			p.Spec.NodeSelector = map[string]string{substrate.VersionLabel: v}
		}
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: pool + "-rs", Controller: ptr.To(true)}}
	}
}

func atelet(v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Labels[substrate.AppLabel] = substrate.AteletApp
		p.Labels[substrate.VersionLabel] = v
	}
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }
func terminating(p *corev1.Pod)                  { p.DeletionTimestamp = &metav1.Time{Time: t0} }

func TestSkews(t *testing.T) {
	pods := func(ps ...*corev1.Pod) []*corev1.Pod { return ps }
	imageOnly := pod("ate-system", "atelet-img", "n1", func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Image: "registry:5000/atelet:v2"}}
	})
	for _, tc := range []struct {
		name    string
		workers []*corev1.Pod
		atelets []*corev1.Pod
		want    int
	}{
		{"same version", pods(pod("w", "p", "n1", worker("small", "v1"))), pods(pod("ate-system", "a", "n1", atelet("v1"))), 0},
		{"other version", pods(pod("w", "p", "n1", worker("small", "v1"))), pods(pod("ate-system", "a", "n1", atelet("v2"))), 1},
		{"other node", pods(pod("w", "p", "n2", worker("small", "v1"))), pods(pod("ate-system", "a", "n1", atelet("v2"))), 0},
		{"unpinned pool ignored", pods(pod("w", "p", "n1", worker("small", ""))), pods(pod("ate-system", "a", "n1", atelet("v2"))), 0},
		{"worker pending", pods(pod("w", "p", "n1", worker("small", "v1"), phase(corev1.PodPending))),
			pods(pod("ate-system", "a", "n1", atelet("v2"))), 0},
		{"worker terminating", pods(pod("w", "p", "n1", worker("small", "v1"), terminating)),
			pods(pod("ate-system", "a", "n1", atelet("v2"))), 0},
		{"atelet pending", pods(pod("w", "p", "n1", worker("small", "v1"))),
			pods(pod("ate-system", "a", "n1", atelet("v2"), phase(corev1.PodPending))), 0},
		{"atelet terminating (the flip's hand-off)", pods(pod("w", "p", "n1", worker("small", "v1"))),
			pods(pod("ate-system", "a", "n1", atelet("v2"), terminating)), 0},
		{"atelet version from image", pods(pod("w", "p", "n1", worker("small", "v1"))), []*corev1.Pod{imageOnly}, 1},
		{"two atelets, one matches", pods(pod("w", "p", "n1", worker("small", "v1"))),
			pods(pod("ate-system", "a", "n1", atelet("v1")), pod("ate-system", "b", "n1", atelet("v2"))), 1},
	} {
		got := skews(tc.workers, tc.atelets)
		if len(got) != tc.want {
			t.Errorf("%s: %v, want %d", tc.name, got, tc.want)
		}
	}
}

func rs(replicas int32, opts ...func(*appsv1.ReplicaSet)) *appsv1.ReplicaSet {
	r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "w", Name: "small-rs"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}}
	for _, o := range opts {
		o(r)
	}
	return r
}

func TestOldPodDeleted(t *testing.T) {
	p := pod("w", "p", "n1", worker("small", "v1"))
	for _, tc := range []struct {
		name string
		p    *corev1.Pod
		n    *corev1.Node
		rs   *appsv1.ReplicaSet
		live int
		bad  bool
	}{
		{"deleted before the flip", p, node("n1", version("v1")), rs(4), 4, true},
		{"second deletion before a replacement", p, node("n1", version("v1")), rs(4), 3, true},
		{"after the flip", p, node("n1", version("v2")), rs(4), 4, false},
		{"node cordoned", p, node("n1", version("v1"), cordoned), rs(4), 4, false},
		{"node gone", p, nil, rs(4), 4, false},
		{"node being deleted", p, node("n1", version("v1"), deleting), rs(4), 4, false},
		{"node NotReady", p, node("n1", version("v1"), notReady), rs(4), 4, false},
		{"scale-down by the controller", p, node("n1", version("v1")), rs(3), 4, false},
		{"ReplicaSet gone (pool deleted)", p, node("n1", version("v1")), nil, 4, false},
		{"ReplicaSet being deleted", p, node("n1", version("v1")), rs(4, func(r *appsv1.ReplicaSet) {
			r.DeletionTimestamp = &metav1.Time{Time: t0}
		}), 4, false},
		{"unpinned", pod("w", "p", "n1", worker("small", "")), node("n1", version("v1")), rs(4), 4, false},
		{"never scheduled", pod("w", "p", "", worker("small", "v1")), node("n1", version("v1")), rs(4), 4, false},
	} {
		if got := oldPodDeleted(tc.p, tc.n, tc.rs, tc.live); (got != "") != tc.bad {
			t.Errorf("%s: %q, want violation %v", tc.name, got, tc.bad)
		}
	}
	if owningReplicaSet(p) != "small-rs" {
		t.Errorf("owner: %q", owningReplicaSet(p))
	}
}

func TestServingAndPoolChange(t *testing.T) {
	ns := map[string]*corev1.Node{"n1": node("n1", version("v1")), "n2": node("n2", version("v2"))}
	on := func(n string, opts ...func(*corev1.Pod)) *corev1.Pod {
		return pod("w", "p-"+n, n, append([]func(*corev1.Pod){worker("small", "v1")}, opts...)...)
	}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want bool
	}{
		{"running on its version", []*corev1.Pod{on("n1")}, true},
		{"only on a flipped node", []*corev1.Pod{on("n2")}, false},
		{"pending everywhere", []*corev1.Pod{on("n1", phase(corev1.PodPending))}, false},
		{"terminating", []*corev1.Pod{on("n1", terminating)}, false},
		{"no pods", nil, false},
		{"unpinned running", []*corev1.Pod{pod("w", "u", "n2", worker("small", ""))}, true},
	} {
		if got := serving(tc.pods, ns); got != tc.want {
			t.Errorf("serving %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	base := &pool{Namespace: "w", Name: "small", Generation: 1, Replicas: 4}
	with := func(f func(*pool)) *pool { c := *base; f(&c); return &c }
	for _, tc := range []struct {
		name    string
		cur     *pool
		serving bool
		want    string
	}{
		{"status only", with(func(*pool) {}), true, ""},
		{"spec edit", with(func(p *pool) { p.Generation = 2 }), true, "spec edited"},
		{"scale down", with(func(p *pool) { p.Generation, p.Replicas = 2, 2 }), true, "scaled down from 4 to 2"},
		{"scale up is still an edit", with(func(p *pool) { p.Generation, p.Replicas = 2, 6 }), true, "spec edited"},
		{"deleted", nil, true, "deleted while serving"},
		{"deletion started", with(func(p *pool) { p.Deleting = true }), true, "deleted while serving"},
		{"edit when not serving", with(func(p *pool) { p.Generation = 2 }), false, ""},
		{"deleted when not serving", nil, false, ""},
	} {
		got := poolChange(base, tc.cur, tc.serving)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestEpisodes(t *testing.T) {
	e := newEpisodes()
	g := 5 * time.Second
	on := map[string]string{"a": ""}
	steps := []struct {
		at   time.Duration
		keys map[string]string
		due  int
	}{
		{0, on, 0},
		{4 * time.Second, on, 0},
		{5 * time.Second, on, 1},
		{9 * time.Second, on, 0}, // reported once per episode
		{10 * time.Second, nil, 0},
		{11 * time.Second, on, 0}, // a new episode starts its own grace
		{16 * time.Second, on, 1},
	}
	for _, s := range steps {
		if got := e.observe(t0.Add(s.at), s.keys, g); len(got) != s.due {
			t.Errorf("at %v: due %v, want %d", s.at, got, s.due)
		}
	}
}

func TestRecoveringNodeDeclaredOnAHeldLease(t *testing.T) {
	declare := func(l *coordv1.Lease, decl string) *coordv1.Lease {
		l.Annotations = map[string]string{AnnRecoveringNode: decl, AnnHolderRun: "r1"}
		return l
	}
	for _, tc := range []struct {
		name   string
		leases []*coordv1.Lease
		want   bool
	}{
		{"held, this node", []*coordv1.Lease{declare(lease("run", 0, ""), "r1/n1")}, true},
		{"held, another node", []*coordv1.Lease{declare(lease("run", 0, ""), "r1/n2")}, false},
		{"left by an earlier run", []*coordv1.Lease{declare(lease("run", 0, ""), "r0/n1")}, false},
		{"no run", []*coordv1.Lease{declare(lease("run", 0, ""), "n1")}, false},
		{"expired", []*coordv1.Lease{declare(lease("run", time.Hour, ""), "r1/n1")}, false},
		{"released", []*coordv1.Lease{declare(lease("", 0, ""), "r1/n1")}, false},
		{"no declaration", []*coordv1.Lease{lease("run", 0, "1")}, false},
	} {
		if got := recovering(tc.leases, "n1", t0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A deletion is judged by the declaration in force when it was requested:
// the declaration may be seen lifted before the last pod's Terminating
// update (two unordered watches), and deletionTimestamp is kept to the
// second.
func TestDeletionJudgedByTheDeclarationWhenRequested(t *testing.T) {
	from, to := t0, t0.Add(10*time.Second)
	w := &watcher{recoveries: map[string][]span{"n1": {{from: from, to: to}}, "n2": {{from: from}}}}
	for _, tc := range []struct {
		name string
		node string
		at   time.Time
		want bool
	}{
		{"requested inside, seen after the lift", "n1", to.Add(-300 * time.Millisecond).Truncate(time.Second), true},
		{"requested at the lift", "n1", to, true},
		{"requested after the lift", "n1", to.Add(time.Second), false},
		{"requested just before the declaration was seen", "n1", from.Add(-time.Second), true},
		{"requested well before", "n1", from.Add(-time.Minute), false},
		{"declaration still in force", "n2", from.Add(time.Hour), true},
		{"another node", "n3", from.Add(time.Second), false},
	} {
		if got := w.recoveringAt(tc.node, tc.at); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
