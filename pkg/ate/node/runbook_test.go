package node

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// TestNodeStepsFromFacts drives every step of the node runbook over
// snapshots of one node: which steps are done, and which guard stops which
// step, from facts alone.
func TestNodeStepsFromFacts(t *testing.T) {
	from, to := []fleet.Pool{{Namespace: "ns", Name: "small", Desired: 2}}, []fleet.Pool{{Namespace: "ns", Name: "small-v2", Desired: 2}}
	cfg := &Config{Sides: Sides{From: "v1", To: "v2", FromPools: from, ToPools: to,
		Lineage: map[string]string{"ns/small": "ns/small", "ns/small-v2": "ns/small"}}}
	node := func(v string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{fleet.VersionLabel: v}}}
	}
	marked := func(v string) *corev1.Node { // the move has begun
		n := node(v)
		n.Annotations = map[string]string{fleet.AnnMovingTo: "v2"}
		return n
	}
	unverified := func(v string) *corev1.Node { // flipped, not yet seen to serve
		n := node(v)
		n.Annotations = map[string]string{fleet.AnnVerifyPending: v}
		return n
	}
	cordoned := func(v string) *corev1.Node { // a run stopped inside the flip
		n := marked(v)
		n.Spec.Unschedulable = true
		n.Annotations[kube.AnnCordonedBy] = CordonOwner
		return n
	}
	pod := func(uid, pool string, ready bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: pool + "-" + uid, UID: types.UID(uid),
			Labels: map[string]string{fleet.PoolLabel: pool}}, Spec: corev1.PodSpec{NodeName: "n1"}}
		if ready {
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return p
	}
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	atelet := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "atelet-v2-x", Labels: map[string]string{fleet.AppLabel: fleet.AteletApp, fleet.VersionLabel: "v2"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready}}
	restarting := atelet // the same atelet after a restart, not Ready yet
	restarting.Status = corev1.PodStatus{Phase: corev1.PodPending}
	all := []string{"ate.node.mark", "ate.node.drain", "ate.node.suspend", "ate.node.flip", "ate.node.release",
		"ate.node.atelet-ready", "ate.node.replace-drained", "ate.node.delete-old-pods", "ate.node.verify"}
	worker := func(uid, pool string, st ateapi.WorkerState, node string) ateapi.Worker {
		return ateapi.Worker{Name: uid, Namespace: "ns", Pool: pool, Pod: pool + "-" + uid, Node: node, State: st}
	}
	running := ateapi.Actor{Atespace: "a", Name: "x", State: ateapi.ActorRunning, Worker: "u1"}
	type want struct {
		done    []string // step IDs done
		blocked string   // the first not-done step's failing guard, "" if none
		serves  int      // the verify's verdict (toVerified): 1 serves, -1 not yet, 0 not checked
	}
	for _, tc := range []struct {
		name      string
		node      *corev1.Node
		pods      []corev1.Pod
		workers   []ateapi.Worker
		actors    []ateapi.Actor
		firstNode bool
		want      want
	}{
		{"fresh node, first of the roll", node("v1"), []corev1.Pod{pod("u1", "small", true)},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerActive, "n1")}, []ateapi.Actor{running}, true,
			want{nil, "", 0}},
		{"fresh node, no free worker of its lineage elsewhere", node("v1"), []corev1.Pod{pod("u1", "small", true)},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerActive, "n1")}, []ateapi.Actor{running}, false,
			want{nil, "enough free workers", 0}},
		{"fresh node, a free clone worker elsewhere", node("v1"), []corev1.Pod{pod("u1", "small", true)},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerActive, "n1"), worker("u9", "small-v2", ateapi.WorkerActive, "n2")},
			[]ateapi.Actor{running}, false, want{nil, "", 0}},
		{"drained but not marked", node("v1"), []corev1.Pod{pod("u1", "small", true)},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerDraining, "n1")}, nil, false,
			want{nil, "", 0}}, // the mark is the move's record: drained by hand is not a move begun (recover-node)
		{"drained, an actor still on it", marked("v1"), []corev1.Pod{pod("u1", "small", true)},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerDraining, "n1")}, []ateapi.Actor{running}, false,
			want{all[:2], "", 0}},
		{"drained and empty: the flip may go", marked("v1"), []corev1.Pod{pod("u1", "small", true)},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerDraining, "n1")}, nil, false,
			want{all[:3], "", 0}},
		{"flipped, the flip's cordon still on", cordoned("v2"), []corev1.Pod{pod("u1", "small", true), atelet},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerDraining, "n1")}, nil, false,
			want{all[:4], "", 0}},
		{"flipped, atelet Ready, old pod left", node("v2"), []corev1.Pod{pod("u1", "small", true), atelet},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerDraining, "n1")}, nil, false,
			want{all[:7], "", 0}},
		{"flipped, a paused actor pinned there and one on a new-pool worker: the delete goes", node("v2"),
			[]corev1.Pod{pod("u1", "small", true), pod("u2", "small-v2", true), atelet},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerDraining, "n1"), worker("u2", "small-v2", ateapi.WorkerActive, "n1")},
			[]ateapi.Actor{{Atespace: "a", Name: "p", State: ateapi.ActorPaused, AssignedNode: "n1", SnapshotNodes: []string{"n1"}},
				{Atespace: "a", Name: "y", State: ateapi.ActorRunning, Worker: "u2"}}, false,
			want{all[:7], "", 0}},
		{"flipped, the old pod's worker hosts an actor", node("v2"), []corev1.Pod{pod("u1", "small", true), atelet},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerDraining, "n1")}, []ateapi.Actor{running}, false,
			// A suspend goes through the atelet of the worker's own node, which the flip removed: the advice
			// is to put that version back, not "suspend and re-run".
			want{all[:7], "no actor lives on the node's workers of the pools it left: worker u1 (pod small-u1), actor a/x on the workers of the v1 pools; " +
				"deleting their pods would crash them. A suspend needs the v1 atelet on the worker's node, which the flip " +
				"removed: put the label back (kubectl label node n1 " + fleet.VersionLabel + "=v1 --overwrite)", 0}},
		{"old pods gone, no new-pool pod placed yet, and no new-pool worker serves anywhere", unverified("v2"),
			[]corev1.Pod{atelet}, nil, nil, false,
			want{all[:8], "", -1}},
		{"old pods gone, no new-pool pod here: they serve on nodes moved earlier", unverified("v2"), []corev1.Pod{atelet},
			[]ateapi.Worker{worker("u7", "small-v2", ateapi.WorkerActive, "n0")}, nil, false,
			want{all[:8], "", 1}},
		{"serving, the verify mark not yet removed", unverified("v2"), []corev1.Pod{pod("u2", "small-v2", true), atelet},
			[]ateapi.Worker{worker("u2", "small-v2", ateapi.WorkerActive, "n1")}, nil, false,
			want{all[:8], "", 1}},
		{"moved: verified", node("v2"), []corev1.Pod{pod("u2", "small-v2", true), atelet},
			[]ateapi.Worker{worker("u2", "small-v2", ateapi.WorkerActive, "n1")}, nil, false,
			want{all, "", 0}},
		{"moved, then its atelet restarts: still moved (the commit point)", node("v2"),
			[]corev1.Pod{pod("u2", "small-v2", true), restarting},
			[]ateapi.Worker{worker("u2", "small-v2", ateapi.WorkerActive, "n1")}, nil, false,
			want{all, "", 0}},
		{"moved but for a pod of the old pool left: the atelet's restart counts", node("v2"),
			[]corev1.Pod{pod("u1", "small", true), restarting}, nil, nil, false,
			want{all[:5], "", 0}},
		{"flipped, not yet verified, its atelet restarting", unverified("v2"), []corev1.Pod{restarting}, nil, nil, false,
			want{all[:5], "", 0}},
		{"marked, killed before the first DrainWorker: past the first step", marked("v1"), []corev1.Pod{pod("u1", "small", true)},
			[]ateapi.Worker{worker("u1", "small", ateapi.WorkerActive, "n1")}, []ateapi.Actor{running}, true,
			want{all[:1], "", 0}},
	} {
		c := *cfg
		c.FirstNode = tc.firstNode
		inv := &ateapi.Inventory{Workers: tc.workers, Actors: tc.actors}
		ateapi.Resolve(inv.Workers, inv.Actors)
		f := nodeFacts{cfg: &c, node: tc.node, pods: tc.pods, inv: inv}
		rb := Runbook(nil, nil, nil, &c)
		pos := runbook.Locate(rb, f)
		var done []string
		for _, s := range rb.Steps[:pos.Step] {
			done = append(done, s.ID)
		}
		blocked := pos.Guard
		if strings.Join(done, ",") != strings.Join(tc.want.done, ",") || !strings.Contains(blocked, tc.want.blocked) ||
			(tc.want.blocked == "") != (blocked == "") {
			t.Errorf("%s: done %v, blocked by %q; want %v, %q", tc.name, done, blocked, tc.want.done, tc.want.blocked)
		}
		if ok, why := f.toVerified(); tc.want.serves != 0 && ok != (tc.want.serves > 0) {
			t.Errorf("%s: serves %v (%s); want %v", tc.name, ok, why, tc.want.serves > 0)
		}
	}
}

// The last node is not verified while a pool lineage has no worker serving
// anywhere: here the large pool's clone never came up (its pods could not
// run), though the small pool's clone serves on the other node.
func TestVerifyWantsEveryLineageServed(t *testing.T) {
	small, large := fleet.Pool{Namespace: "ns", Name: "small", Pin: "v1", Desired: 1}, fleet.Pool{Namespace: "ns", Name: "large", Pin: "v1", Desired: 1}
	smallV2, largeV2 := fleet.Pool{Namespace: "ns", Name: "small-v2", Pin: "v2", Desired: 1}, fleet.Pool{Namespace: "ns", Name: "large-v2", Pin: "v2",
		Desired: 1}
	cfg := &Config{Sides: Sides{From: "v1", To: "v2", FromPools: []fleet.Pool{small, large}, ToPools: []fleet.Pool{smallV2, largeV2},
		Lineage: map[string]string{"ns/small": "ns/small", "ns/small-v2": "ns/small", "ns/large": "ns/large", "ns/large-v2": "ns/large"}}}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{fleet.VersionLabel: "v2"},
		Annotations: map[string]string{fleet.AnnVerifyPending: "v2"}}}
	inv := &ateapi.Inventory{Workers: []ateapi.Worker{
		{Name: "s2", Namespace: "ns", Pool: "small-v2", Node: "n0", State: ateapi.WorkerActive},
		{Name: "l1", Namespace: "ns", Pool: "large", Node: "n1", State: ateapi.WorkerDraining},
	}}
	f := nodeFacts{cfg: cfg, node: n, inv: inv}
	if ok, why := f.toVerified(); ok || !strings.Contains(why, "ns/large") {
		t.Fatalf("verified with the large lineage serving nowhere: %v %q", ok, why)
	}
	inv.Workers = append(inv.Workers, ateapi.Worker{Name: "l2", Namespace: "ns", Pool: "large-v2", Node: "n0", State: ateapi.WorkerActive})
	if ok, why := f.toVerified(); !ok {
		t.Fatalf("not verified with every lineage served: %q", why)
	}
}
