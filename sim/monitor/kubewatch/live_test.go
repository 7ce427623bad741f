package kubewatch

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestLiveReplicasCountsInWatchOrder replays what the pod watch delivers
// when a run deletes one of a ReplicaSet's four pods and the controller
// replaces it: the replacement is created after the deletion, so the
// deletion must be judged on four live pods, not five (the scale-down that
// an informer store already holding the replacement would suggest).
func TestLiveReplicasCountsInWatchOrder(t *testing.T) {
	live := liveReplicas{}
	mk := func(uid string, opts ...func(*corev1.Pod)) *corev1.Pod {
		p := pod("ns", uid, "n1", append([]func(*corev1.Pod){worker("pool", "v1")}, opts...)...)
		p.UID = types.UID(uid)
		return p
	}
	for _, uid := range []string{"a", "b", "c", "d"} {
		live.observe(mk(uid), false)
	}
	if got := live.observe(mk("b", terminating), false); got != 4 {
		t.Fatalf("the Terminating update of b saw %d live pods before it, want 4", got)
	}
	live.observe(mk("e"), false) // the replacement
	if got := live.observe(mk("b", terminating), true); got != 4 {
		t.Fatalf("b's removal saw %d live pods, want 4 (a, c, d and its replacement e)", got)
	}
	// A pod deleted at once (no Terminating update) is counted before it goes.
	if got := live.observe(mk("c"), true); got != 4 {
		t.Fatalf("c's immediate deletion saw %d, want 4", got)
	}
	if got := live.observe(mk("c"), true); got != 3 {
		t.Fatalf("after c left, %d live, want 3", got)
	}
	unowned := pod("ns", "solo", "n1")
	if got := live.observe(unowned, false); got != 0 {
		t.Fatalf("a pod no ReplicaSet owns counted %d", got)
	}
	if len(live) != 1 {
		t.Fatalf("sets kept: %v", live)
	}
}
