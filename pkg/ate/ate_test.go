package ate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rollbook/rollbook/pkg/ateapi"
)

func wp(name, pin string, labels map[string]string, limits map[string]any) Pool {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ate.dev/v1alpha1", "kind": "WorkerPool",
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"spec": map[string]any{"replicas": int64(2), "workerImage": "old@sha256:" + strings.Repeat("a", 64), "sandboxClass": "gvisor",
			"template": map[string]any{"nodeSelector": map[string]any{VersionLabel: pin}, "resources": map[string]any{"limits": limits}}},
	}}
	u.SetLabels(labels)
	return poolOf(u)
}

func cluster(atelets []Atelet, nodes map[string]string, pools ...Pool) *Cluster {
	c := &Cluster{Atelets: atelets, Pools: pools}
	for _, n := range []string{"n0", "n1", "n2"} {
		if v, ok := nodes[n]; ok {
			c.Nodes = append(c.Nodes, NodeInfo{Name: n, Version: v})
		}
	}
	c.infer()
	return c
}

var twoDS = []Atelet{{Name: "atelet-v1", Version: "v1", Versioned: true}, {Name: "atelet-v2", Version: "v2", Versioned: true}}

func TestInferProblems(t *testing.T) {
	for _, tc := range []struct {
		name    string
		atelets []Atelet
		nodes   map[string]string
		want    string
	}{
		{"third DaemonSet", append(twoDS, Atelet{Name: "atelet-v3", Version: "v3", Versioned: true}), map[string]string{"n0": "v1"},
			"a third one means"},
		{"unversioned", []Atelet{{Name: "atelet", Version: ""}}, map[string]string{"n0": "v1"}, "predates versioned builds"},
		{"unlabelled node", twoDS, map[string]string{"n0": "v1", "n1": ""}, "without ate.dev/substrate-version"},
		{"odd version", twoDS, map[string]string{"n0": "v1", "n1": "v9"}, "neither OLD nor NEW"},
		{"none", nil, map[string]string{"n0": "v1"}, "no atelet DaemonSet"},
	} {
		c := cluster(tc.atelets, tc.nodes)
		if !strings.Contains(strings.Join(c.Problems, "|"), tc.want) {
			t.Errorf("%s: problems %v, want %q", tc.name, c.Problems, tc.want)
		}
	}
	if c := cluster(twoDS, map[string]string{"n0": "v1", "n1": "v2"}); len(c.Problems) != 0 || c.Old != "v1" || c.New != "v2" {
		t.Errorf("healthy: %+v", c)
	}
}

func TestPlanClones(t *testing.T) {
	labels := map[string]string{"runtime": "python"}
	old := wp("counter-v1", "v1", labels, map[string]any{"cpu": "2"})
	c := cluster(twoDS, map[string]string{"n0": "v1"}, old)
	plans, err := PlanClones(c, Images{Any: "new@sha256:" + strings.Repeat("b", 64)})
	if err != nil || len(plans) != 1 {
		t.Fatalf("plans %v err %v", plans, err)
	}
	p := plans[0]
	got := poolOf(p.Object)
	if p.Name != "counter-v2" || got.Pin != "v2" || got.Image != p.Image || got.Labels["runtime"] != "python" ||
		got.ClonedFrom != "ns/counter-v1" {
		t.Fatalf("clone: name %s %+v", p.Name, got)
	}
	if classes, _, _ := unstructured.NestedSlice(p.Object.Object, "spec", "sandboxClasses"); len(classes) != 1 {
		t.Fatalf("sandboxClass was not turned into sandboxClasses: %v", p.Object.Object["spec"])
	}
	if p.Object.GetResourceVersion() != "" || p.Object.Object["status"] != nil {
		t.Fatal("clone copies server-owned fields")
	}
	if err := CheckLimits(p); err != nil {
		t.Fatalf("same limits refused: %v", err)
	}
	_ = unstructured.SetNestedField(p.Object.Object, "1", "spec", "template", "resources", "limits", "cpu")
	if err := CheckLimits(p); err == nil || !strings.Contains(err.Error(), "shrinks limit cpu") {
		t.Fatalf("a shrunk limit must be refused: %v", err)
	}
	// Once the clone exists (by annotation), nothing is planned.
	clone := poolOf(plans[0].Object)
	c = cluster(twoDS, map[string]string{"n0": "v1"}, old, clone)
	if plans, _ := PlanClones(c, Images{Any: "x"}); len(plans) != 0 {
		t.Fatalf("planned a second clone: %v", plans)
	}
}

func TestValidateImageAndCloneName(t *testing.T) {
	for ref, ok := range map[string]bool{
		"reg.io/ateom:v2@sha256:" + strings.Repeat("0", 64): true,
		"reg.io/ateom@sha256:" + strings.Repeat("f", 64):    true,
		"reg.io/ateom:v2":           false,
		"reg.io/ateom@sha256:short": false,
		"reg.io/ateom:v2@sha256:" + strings.Repeat("0", 64) + "; rm -rf /": false,
	} {
		if err := ValidateImage(ref); (err == nil) != ok {
			t.Errorf("ValidateImage(%q) = %v", ref, err)
		}
	}
	for pool, want := range map[string]string{"counter-v2": "counter-v0-3-0", "python-small": "python-small-v0-3-0"} {
		if got := CloneName(pool, "v0.3.0"); got != want {
			t.Errorf("CloneName(%s) = %s, want %s", pool, got, want)
		}
	}
}

func TestNextNodeResumesHalfMovedNodeFirst(t *testing.T) {
	c := cluster(twoDS, map[string]string{"n0": "v1", "n1": "v1", "n2": "v2"})
	c.Pools = []Pool{{Namespace: "ns", Name: "p", Pin: "v1"}, {Namespace: "ns", Name: "p-v2", Pin: "v2", ClonedFrom: "ns/p"}}
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
	oldPodOnFlipped := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-1", Labels: map[string]string{PoolLabel: "p"}},
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
	livePod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-w", UID: "w", Labels: map[string]string{PoolLabel: "p"}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if got := next([]corev1.Pod{livePod}, inv); got != "n0" {
		t.Fatalf("a node drained with no move recorded is not half-moved: %s", got)
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
	moves := NewLocator(c, []corev1.Pod{livePod}, inv).Moves()
	if len(moves) != 1 || moves[0].Node != "n1" || moves[0].Direction != Rollback || moves[0].StepID != "ate.node.replace-drained" {
		t.Fatalf("n1 taken back, its workers not yet replaced: %+v", moves)
	}
	if _, err := NewLocator(c, []corev1.Pod{livePod}, inv).Next(roll); err == nil {
		t.Fatal("roll next-node took a node while n1 is being taken back")
	}
	c.Nodes[1].MovingTo, c.Nodes[1].VerifyPending = "", ""
	// A node half-way back (an interrupted rollback) is finished first, by
	// the rollback: the roll refuses to take another node meanwhile.
	c.Nodes[2].MovingTo = "v1"
	if _, err := NewLocator(c, nil, &ateapi.Inventory{}).Next(roll); err == nil || !strings.Contains(err.Error(), "rollback next-node") {
		t.Fatalf("roll next-node with n2 half-way back: %v, want a refusal naming kubectl ate rollback next-node", err)
	}
}
