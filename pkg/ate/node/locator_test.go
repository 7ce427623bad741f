package node

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

func TestNextNodeResumesHalfMovedNodeFirst(t *testing.T) {
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v1", "n2": "v2"})
	c.Pools = []fleet.Pool{{Namespace: "ns", Name: "p", Pin: "v1"}, {Namespace: "ns", Name: "p-v2", Pin: "v2", ClonedFrom: "ns/p"}}
	roll := sides(c, "v1", "v2")
	next := func(pods []corev1.Pod, inv *ateapi.Inventory) string {
		t.Helper()
		n, err := NewLocator(c, pods, inv).Next(roll)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := next(nil, &ateapi.Inventory{}); got != "n0" {
		t.Fatalf("fresh pick: %s", got)
	}
	oldPodOnFlipped := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-1", Labels: map[string]string{fleet.PoolLabel: "p"}},
		Spec: corev1.PodSpec{NodeName: "n2"}}
	if got := next([]corev1.Pod{oldPodOnFlipped}, nil); got != "n2" {
		t.Fatalf("a flipped node with old pods left must come first: %s", got)
	}
	failed := *oldPodOnFlipped.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	if got := next([]corev1.Pod{failed}, nil); got != "n0" {
		t.Fatalf("a Failed old-pool pod object left on a flipped node does not make it half-moved: %s", got)
	}
	// Workers drained with no move recorded (by hand, a health check's
	// drain) are not a move begun: the mark, written before the first
	// DrainWorker, is the move's record. recover-node replaces them.
	inv := &ateapi.Inventory{Workers: []ateapi.Worker{{Name: "w", Namespace: "ns", Pool: "p", Node: "n1",
		State: ateapi.WorkerDraining}}}
	livePod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-w", UID: "w", Labels: map[string]string{fleet.PoolLabel: "p"}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if l := NewLocator(c, []corev1.Pod{livePod}, inv); len(l.HalfMoved()) != 0 || len(l.Drained()) != 1 {
		t.Fatalf("a node drained with no move recorded is not half-moved, it is drained: %v %v", l.HalfMoved(), l.Drained())
	}
	// It serves nothing new already: moving it is the move, and taking
	// another node would put a second one out of service.
	if got := next([]corev1.Pod{livePod}, inv); got != "n1" {
		t.Fatalf("a drained node at OLD is taken first: %s", got)
	}
	if err := NewLocator(c, []corev1.Pod{livePod}, inv).Named("n0"); err == nil || !strings.Contains(err.Error(), "recover-node n1") {
		t.Fatalf("naming another node while n1 is drained: %v", err)
	}
	c.Nodes[1].MovingTo = "v2"
	if got := next([]corev1.Pod{livePod}, inv); got != "n1" {
		t.Fatalf("a node whose move is recorded comes first: %s", got)
	}
	// The rollback takes that node back first (it never flipped: its
	// drained workers are replaced, the mark lifted); once the rollback has
	// written its own mark over the roll's, the node is half-way back, and
	// status and the roll say so.
	back := sides(c, "v2", "v1")
	if n, err := NewLocator(c, []corev1.Pod{livePod}, inv).Next(back); err != nil || n != "n1" {
		t.Fatalf("rollback next-node with n1 half-way to v2: %q %v, want n1 taken back", n, err)
	}
	c.Nodes[1].MovingTo, c.Nodes[1].VerifyPending = "v1", "v1"
	moves := NewLocator(c, []corev1.Pod{livePod}, inv).HalfMoved()
	if len(moves) != 1 || moves[0].Node != "n1" || moves[0].Direction != Rollback || moves[0].StepID != "ate.node.release" {
		t.Fatalf("n1 taken back, its mark not yet lifted: %+v", moves)
	}
	if moves[0].Next() != "kubectl ate rollback next-node" || moves[0].Back() != "kubectl ate roll next-node" {
		t.Fatalf("n1's way on and way back: %q, %q", moves[0].Next(), moves[0].Back())
	}
	// The roll takes no other node meanwhile: it takes n1 (the way back
	// from the rollback's stop), never n0.
	if n, err := NewLocator(c, []corev1.Pod{livePod}, inv).Next(roll); err != nil || n != "n1" {
		t.Fatalf("roll next-node while n1 is being taken back: %q %v, want n1", n, err)
	}
	// Its mark lifted, the take-back is still recorded (verify pending):
	// its drained workers are still to be replaced.
	c.Nodes[1].MovingTo = ""
	moves = NewLocator(c, []corev1.Pod{livePod}, inv).HalfMoved()
	if len(moves) != 1 || moves[0].Node != "n1" || moves[0].StepID != "ate.node.atelet-ready" {
		t.Fatalf("n1 taken back, unmarked: %+v", moves)
	}
	c.Nodes[1].VerifyPending = ""
	if d := NewLocator(c, []corev1.Pod{livePod}, inv).Drained(); len(d) != 1 || d[0].Node != "n1" ||
		d[0].Next() != "kubectl ate recover-node n1" {
		t.Fatalf("n1 drained with no move recorded: %+v, want recover-node named", d)
	}
	// A node half-way back (an interrupted rollback) is finished first;
	// the roll, asked, takes that node forward again, never another.
	c.Nodes[2].MovingTo = "v1"
	if n, err := NewLocator(c, nil, &ateapi.Inventory{}).Next(roll); err != nil || n != "n2" {
		t.Fatalf("roll next-node with n2 half-way back: %q %v, want n2", n, err)
	}
}

// A node someone else cordoned (a person, another runbook) is picked last:
// the roll moves every other node first, then stops on it, saying so
// (othersCordonGuard); the roll's own cordon is no reason to wait.
func TestNextNodeLeavesOthersCordonsForLast(t *testing.T) {
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v1", "n2": "v1"})
	c.Pools = []fleet.Pool{{Namespace: "ns", Name: "p", Pin: "v1"}, {Namespace: "ns", Name: "p-v2", Pin: "v2", ClonedFrom: "ns/p"}}
	roll := sides(c, "v1", "v2")
	next := func() string {
		t.Helper()
		n, err := NewLocator(c, nil, &ateapi.Inventory{}).Next(roll)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	c.Nodes[0].Cordoned = true // a person's
	c.Nodes[1].Cordoned, c.Nodes[1].CordonedBy = true, "tt-kmd"
	if got := next(); got != "n2" {
		t.Fatalf("with n0 and n1 cordoned by others: %s, want n2", got)
	}
	c.Nodes[2].Version = "v2"
	if got := next(); got != "n0" {
		t.Fatalf("only others' cordons left: %s, want n0 (its guard says why it stops)", got)
	}
	c.Nodes[0].CordonedBy = CordonOwner
	if got := next(); got != "n0" {
		t.Fatalf("the roll's own cordon: %s, want n0", got)
	}
	f := nodeFacts{node: c.Nodes[1].Stub()}
	if ok, why := othersCordonGuard().Check(f); ok || !strings.Contains(why, "rollbook tt-kmd") {
		t.Fatalf("n1 cordoned by tt-kmd: guard passes %v, %q", ok, why)
	}
	f = nodeFacts{node: c.Nodes[0].Stub()}
	if ok, _ := othersCordonGuard().Check(f); !ok {
		t.Fatal("the roll's own cordon stops the guard")
	}
}
