package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/httpcount"
	"github.com/rollbook/rollbook/internal/recordtest"
	"github.com/rollbook/rollbook/internal/simtest"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 4}) }

func getNode(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func setUnschedulable(t *testing.T, cs kubernetes.Interface, node string, v bool) {
	t.Helper()
	patch := []byte(`{"spec":{"unschedulable":` + map[bool]string{true: "true", false: "false"}[v] + `}}`)
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestCordonOwnership(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	rec := &recordtest.Recorder{}
	const node = "kwok-node-3"
	t.Cleanup(func() { setUnschedulable(t, c.Client, node, false) })

	st, err := cordonByName(ctx, c.Client, rec, node, "tt-kmd", "run-1")
	if err != nil || !st.Cordoned || st.Owner != "tt-kmd" {
		t.Fatalf("cordon: %+v, %v", st, err)
	}
	// Cordoning again is a no-op: no second event, same owner and run.
	st, err = cordonByName(ctx, c.Client, rec, node, "tt-kmd", "run-2")
	if err != nil || st.Run != "run-1" || rec.Count("Cordoned") != 1 {
		t.Fatalf("second cordon: %+v, %v, records %v", st, err, rec.All())
	}
	// Another runbook does not own it and must not lift it.
	st, err = uncordonByName(ctx, c.Client, rec, node, "tt-firmware")
	if err != nil || !st.Cordoned || st.Owner != "tt-kmd" {
		t.Fatalf("foreign uncordon must leave it: %+v, %v", st, err)
	}
	st, err = uncordonByName(ctx, c.Client, rec, node, "tt-kmd")
	if err != nil || st.Cordoned {
		t.Fatalf("owner uncordon: %+v, %v", st, err)
	}
	n := getNode(t, c.Client, node)
	if n.Spec.Unschedulable || n.Annotations[AnnCordonedBy] != "" {
		t.Fatalf("node still cordoned or annotated: %v %v", n.Spec.Unschedulable, n.Annotations)
	}

	// A cordon someone else put there is never claimed nor lifted.
	setUnschedulable(t, c.Client, node, true)
	st, err = cordonByName(ctx, c.Client, rec, node, "tt-kmd", "run-3")
	if err != nil || !st.Foreign() {
		t.Fatalf("foreign cordon should stay foreign: %+v, %v", st, err)
	}
	st, err = uncordonByName(ctx, c.Client, rec, node, "tt-kmd")
	if err != nil || !st.Cordoned || !getNode(t, c.Client, node).Spec.Unschedulable {
		t.Fatalf("uncordon lifted a foreign cordon: %+v, %v", st, err)
	}
	if rec.Count("Uncordoned") != 1 {
		t.Fatalf("want exactly one Uncordoned record, got %v", rec.All())
	}
}

func TestPatchNodeDetectsConcurrentWriter(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	stale := getNode(t, c.Client, "kwok-node-2")
	// Someone else writes in between our read and our patch.
	if _, err := PatchNode(ctx, c.Client, stale, NodeChange{Labels: map[string]*string{"simtest/other": ptr.To("1")}}); err != nil {
		t.Fatal(err)
	}
	_, err := PatchNode(ctx, c.Client, stale, NodeChange{Labels: map[string]*string{"simtest/mine": ptr.To("1")}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("patch from a stale read: got %v, want Conflict", err)
	}
	// UpdateNode re-reads and succeeds.
	n, err := UpdateNode(ctx, c.Client, "kwok-node-2", func(*corev1.Node) (NodeChange, error) {
		return NodeChange{Labels: map[string]*string{"simtest/mine": ptr.To("1"), "simtest/other": nil}}, nil
	})
	if err != nil || n.Labels["simtest/mine"] != "1" || n.Labels["simtest/other"] != "" {
		t.Fatalf("UpdateNode: %v %v", n.Labels, err)
	}
	_, _ = UpdateNode(ctx, c.Client, "kwok-node-2", func(*corev1.Node) (NodeChange, error) {
		return NodeChange{Labels: map[string]*string{"simtest/mine": nil}}, nil
	})
}

// UpdateNodeKeysFrom's precondition is the keys it decided from: another
// writer's change to anything else costs one request, not a conflict, a
// read and a second patch; a change to a key it read makes it decide again
// from a fresh read.
func TestUpdateNodeKeysFromTestsOnlyTheKeysItRead(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	cs, requests := httpcount.Client(c.RESTConfig)
	const node, gate, record = "kwok-node-3", "simtest/gate", "simtest/gate-prior"
	defer func() {
		_, _ = SetNodeKeys(context.Background(), c.Client, node, NodeChange{
			Labels: map[string]*string{gate: nil, "simtest/other": nil}, Annotations: map[string]*string{record: nil}})
	}()
	if _, err := SetNodeKeys(ctx, c.Client, node, NodeChange{Labels: map[string]*string{gate: ptr.To("true")}}); err != nil {
		t.Fatal(err)
	}
	closeGate := func(n *corev1.Node) (NodeChange, error) {
		return NodeChange{Labels: map[string]*string{gate: ptr.To("false")},
			Annotations: map[string]*string{record: ptr.To(n.Labels[gate])}}, nil
	}
	reads := NodeKeys{Labels: []string{gate}, Annotations: []string{record}}

	stale := getNode(t, c.Client, node)
	if _, err := SetNodeKeys(ctx, c.Client, node, NodeChange{Labels: map[string]*string{"simtest/other": ptr.To("1")}}); err != nil {
		t.Fatal(err)
	}
	requests.Store(0)
	n, err := UpdateNodeKeysFrom(ctx, cs, stale, reads, closeGate)
	if err != nil || n.Labels[gate] != "false" || n.Annotations[record] != "true" || n.Labels["simtest/other"] != "1" {
		t.Fatalf("after an unrelated write: labels %v annotations %v, %v", n.Labels, n.Annotations, err)
	}
	if got := requests.Load(); got != 1 {
		t.Errorf("an unrelated write cost %d requests, want 1", got)
	}

	// Someone changes the gate between our read and our write: the record
	// must hold their value, not the one we read.
	stale = getNode(t, c.Client, node)
	if _, err := SetNodeKeys(ctx, c.Client, node, NodeChange{Labels: map[string]*string{gate: ptr.To("maybe")}}); err != nil {
		t.Fatal(err)
	}
	n, err = UpdateNodeKeysFrom(ctx, cs, stale, reads, closeGate)
	if err != nil || n.Labels[gate] != "false" || n.Annotations[record] != "maybe" {
		t.Fatalf("after a write to a key read: labels %v annotations %v, %v", n.Labels, n.Annotations, err)
	}

	// A cordon decided from spec.unschedulable: someone cordons in between,
	// and the cordon is decided again (not taken over); uncordoned, a
	// write to anything else costs nothing.
	t.Cleanup(func() { setUnschedulable(t, c.Client, node, false) })
	cordon := func(n *corev1.Node) (NodeChange, error) {
		ch, _ := CordonChange(n, "test-keys", "run-1")
		return ch, nil
	}
	withCordon := NodeKeys{Annotations: []string{AnnCordonedBy}, Unschedulable: true}
	stale = getNode(t, c.Client, node)
	other := NodeChange{Labels: map[string]*string{"simtest/other": ptr.To("2")}}
	if _, err := SetNodeKeys(ctx, c.Client, node, other); err != nil {
		t.Fatal(err)
	}
	requests.Store(0)
	n, err = UpdateNodeKeysFrom(ctx, cs, stale, withCordon, cordon)
	if err != nil || !CordonedBy(n, "test-keys", "run-1") {
		t.Fatalf("cordon after an unrelated write: %+v, %v", CordonStateOf(n), err)
	}
	if got := requests.Load(); got != 1 {
		t.Errorf("a cordon after an unrelated write cost %d requests, want 1", got)
	}
	setUnschedulable(t, c.Client, node, false)
	if _, err := SetNodeKeys(ctx, c.Client, node, NodeChange{Annotations: clearCordonAnnotations()}); err != nil {
		t.Fatal(err)
	}
	stale = getNode(t, c.Client, node)
	setUnschedulable(t, c.Client, node, true) // someone else's cordon
	if n, err = UpdateNodeKeysFrom(ctx, cs, stale, withCordon, cordon); err != nil || CordonStateOf(n).Owner != "" {
		t.Fatalf("a foreign cordon in between was taken over: %+v, %v", CordonStateOf(n), err)
	}
}

func deployment(ns, name string, replicas int32, pod corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

func onNode(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
			}}}},
		},
	}}
}

// A run killed while its eviction was in flight can leave the eviction
// half done: the API server admitted it (the PDB lists the pod among its
// disrupted pods, so the budget already counts it gone) but the delete that
// follows was cancelled with the request. Until the disruption controller
// forgets the entry (two minutes), every eviction of that pod is refused.
// The drain completes the admitted eviction instead of waiting it out.
func TestDrainFinishesAnEvictionWhoseDeleteWasLost(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	ns := c.NewNamespace(t)
	rec := &recordtest.Recorder{}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/served"}}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "served", 3, spec), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "served-pdb", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "served"}}},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := WaitForDeploymentAvailable(ctx, c.Client, ns, "served"); err != nil {
		t.Fatal(err)
	}
	var victim, other corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "served-pdb", metav1.GetOptions{})
		if err != nil || p.Status.CurrentHealthy != 3 || p.Status.ObservedGeneration != p.Generation {
			return false, err
		}
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 3 {
			return false, err
		}
		victim, other = pods.Items[0], pods.Items[1]
		// What an admitted eviction writes before its delete: the pod in
		// the PDB's disrupted pods, one disruption fewer allowed.
		p.Status.DisruptedPods = map[string]metav1.Time{victim.Name: metav1.Now()}
		p.Status.DisruptionsAllowed = 0
		_, err = c.Client.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The budget is spent on the victim: evicting another pod is refused.
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: other.Name, Namespace: ns}}
	if err := c.Client.PolicyV1().Evictions(ns).Evict(ctx, ev); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting another pod while the budget is spent: %v, want 429", err)
	}
	start := time.Now()
	err := Drain(ctx, c.Client, rec, victim.Spec.NodeName, DrainOptions{Pods: []corev1.Pod{victim}, Timeout: 20 * time.Second,
		RetryDelay: 5 * time.Second})
	if err != nil {
		t.Fatalf("drain of the half-evicted pod: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the half-evicted pod is still there: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the drain took %s: it waited on the PDB instead of completing the admitted eviction", took)
	}
}

// A run interrupted while its delete was in flight: the server may have
// deleted the object all the same (the request reached it), and then the
// record must not be lost; when it did not, nothing is recorded.
func TestDeleteInterruptedMidRequestStillRecordsWhatHappened(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	cms := c.Client.CoreV1().ConfigMaps(ns)
	for _, reached := range []bool{true, false} {
		rec := &recordtest.Recorder{}
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "pool-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		interrupted := func(ctx context.Context, name string, o metav1.DeleteOptions) error {
			if reached { // the server applies it; the client sees only its cancellation
				if err := cms.Delete(context.WithoutCancel(ctx), name, o); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			return context.Canceled
		}
		first := true
		del := func(ctx context.Context, name string, o metav1.DeleteOptions) error {
			if first {
				first = false
				return interrupted(ctx, name, o)
			}
			return cms.Delete(ctx, name, o)
		}
		ref := corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: cm.Name, UID: cm.UID}
		if _, err := DeleteIfUnchanged(runCtx, rec, del, ref, cm.UID, "test"); err == nil {
			t.Fatal("an interrupted delete should report its error")
		}
		_, gerr := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if gone := apierrors.IsNotFound(gerr); gone != reached {
			t.Fatalf("reached=%v: the check changed the object (gone: %v)", reached, gone)
		}
		if got, want := rec.Count("Deleted"), map[bool]int{true: 1, false: 0}[reached]; got != want {
			t.Errorf("reached=%v: %d Deleted records, want %d", reached, got, want)
		}
	}
}

func TestDrainFilterAndPDBReport(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	ns := c.NewNamespace(t)
	const node = "kwok-node-1"
	rec := &recordtest.Recorder{}

	// "device" pods (selected by the filter) and "web" pods (not) on the node;
	// "guarded" is selected but its PDB allows no disruption.
	for _, name := range []string{"device", "web", "guarded"} {
		spec := corev1.PodSpec{Affinity: onNode(node), Containers: []corev1.Container{{Name: "c", Image: "example.com/" + name}}}
		if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, deployment(ns, name, 2, spec), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded-pdb", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"device", "web", "guarded"} {
		if _, err := WaitForDeploymentAvailable(ctx, c.Client, ns, d); err != nil {
			t.Fatalf("deployment %s: %v", d, err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guarded-pdb", metav1.GetOptions{})
		return err == nil && p.Status.CurrentHealthy == 2 && p.Status.ObservedGeneration == p.Generation, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cordonByName(ctx, c.Client, rec, node, "test", "r"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = uncordonByName(context.Background(), c.Client, rec, node, "test") })

	// Only "device" pods: evicted, and the drain waits for them to be gone.
	isDevice := func(p *corev1.Pod) bool { return p.Namespace == ns && p.Labels["app"] == "device" }
	if err := Drain(ctx, c.Client, rec, node, DrainOptions{PodFilter: isDevice, Timeout: 30 * time.Second}); err != nil {
		t.Fatalf("drain device pods: %v", err)
	}
	pods, err := PodsOnNode(ctx, c.Client, node)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for _, p := range pods {
		if p.Namespace == ns {
			left[p.Labels["app"]]++
		}
	}
	if left["device"] != 0 || left["web"] != 2 || left["guarded"] != 2 {
		t.Fatalf("after filtered drain, pods left on node: %v; want no device pods and the rest untouched", left)
	}
	if got := rec.Count("Evicting"); got != 2 {
		t.Fatalf("want 2 eviction records, got %d: %v", got, rec.All())
	}

	// "guarded" cannot go anywhere (pinned to the cordoned node) and its PDB
	// needs both: the drain must give up and name the pods and the PDB.
	isGuarded := func(p *corev1.Pod) bool { return p.Namespace == ns && p.Labels["app"] == "guarded" }
	err = Drain(ctx, c.Client, rec, node, DrainOptions{PodFilter: isGuarded, Timeout: 3 * time.Second, RetryDelay: 500 * time.Millisecond})
	var de *DrainError
	if !errors.As(err, &de) {
		t.Fatalf("want *DrainError, got %v", err)
	}
	if len(de.Blockers) != 2 {
		t.Fatalf("want 2 blockers, got %+v", de.Blockers)
	}
	for _, b := range de.Blockers {
		if len(b.PDBs) != 1 || !strings.HasPrefix(b.PDBs[0], "guarded-pdb") {
			t.Fatalf("blocker %s does not name its PDB: %+v", b.Name, b)
		}
	}
	if !strings.Contains(err.Error(), "guarded-pdb") {
		t.Fatalf("error does not name the PDB: %v", err)
	}
}

func TestHelperPodLifecycle(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	rec := &recordtest.Recorder{}
	spec := HelperSpec{Task: "kmd", Node: "kwok-node-0", Key: "2.8.0", Namespace: ns, Image: "example.com/helper:1",
		Command: []string{"kubectl-tt", "node-agent", "kmd"}, Deadline: time.Minute, RunID: "run-1"}

	pod, created, err := EnsureHelper(ctx, c.Client, rec, spec)
	if err != nil || !created {
		t.Fatalf("first EnsureHelper: created=%v err=%v", created, err)
	}
	if pod.Spec.NodeName != "kwok-node-0" || *pod.Spec.ActiveDeadlineSeconds != 60 || pod.Labels[LabelHelper] != "kmd" {
		t.Fatalf("helper pod spec: %+v", pod.Spec)
	}
	// A re-run finds the same pod instead of starting a second one.
	again, created, err := EnsureHelper(ctx, c.Client, rec, spec)
	if err != nil || created || again.UID != pod.UID {
		t.Fatalf("second EnsureHelper: created=%v uid %s vs %s, err=%v", created, again.UID, pod.UID, err)
	}
	// Another version is another pod.
	if HelperName("kmd", "kwok-node-0", "2.9.0") == pod.Name {
		t.Fatal("helper names must differ per key")
	}

	// Finish it the way a kubelet would, with a termination message.
	go func() {
		time.Sleep(200 * time.Millisecond)
		p, _ := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		p.Status.Phase = corev1.PodSucceeded
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kmd", Image: spec.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: `{"ok":true}`}}}}
		_, _ = c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	}()
	done, err := WaitForHelper(ctx, c.Client, ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	msg, code, ok := TerminationMessage(done)
	if !ok || code != 0 || msg != `{"ok":true}` {
		t.Fatalf("termination message: %q %d %v", msg, code, ok)
	}
	deleted, err := CleanupHelpers(ctx, c.Client, rec, ns, "kmd", "kwok-node-0")
	if err != nil || len(deleted) != 1 {
		t.Fatalf("cleanup: %v %v", deleted, err)
	}
	if err := WaitForPodGone(ctx, c.Client, ns, pod.Name); err != nil {
		t.Fatal(err)
	}
}

// A pod that has a helper's name but not its spec is never adopted: it is
// replaced by the helper this run renders. One with the same spec (an
// earlier run's) is adopted, whatever run made it.
func TestHelperAdoptedOnlyWhenSpecMatches(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	rec := &recordtest.Recorder{}
	spec := HelperSpec{Task: "flash", Node: "kwok-node-1", Key: "19.0.0", Namespace: ns, Image: "example.com/helper:1",
		Command: []string{"kubectl-tt", "node-agent", "flash"}, Deadline: time.Minute, RunID: "run-1",
		HostPaths: []HostPathMount{{Name: "host", HostPath: "/", MountPath: "/host"}}}

	forged := spec.Pod()
	forged.Spec.Containers[0].Image = "example.com/not-rollbook:1" // the old spec hash annotation stays
	forged.Spec.Containers[0].Command = []string{"sh", "-c", "echo '{\"success\":true}' > /dev/termination-log"}
	planted, err := c.Client.CoreV1().Pods(ns).Create(ctx, forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if HelperMatches(planted, spec) {
		t.Fatal("a pod with another image and command matches the helper's spec")
	}
	// Unfinished, it may be another release's helper mid-flash: left alone, not adopted.
	var foreign *ForeignHelperError
	if _, _, err := EnsureHelper(ctx, c.Client, rec, spec); !errors.As(err, &foreign) {
		t.Fatalf("EnsureHelper over an unfinished foreign pod: %v, want a ForeignHelperError", err)
	}
	planted.Status.Phase = corev1.PodSucceeded
	if _, err := c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, planted, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, created, err := EnsureHelper(ctx, c.Client, rec, spec)
	if err != nil || !created || pod.UID == planted.UID {
		t.Fatalf("EnsureHelper over a foreign pod: created=%v err=%v (uid %s, planted %s)", created, err, pod.UID, planted.UID)
	}
	if pod.Spec.Containers[0].Image != spec.Image || !HelperMatches(pod, spec) {
		t.Fatalf("the replacement is not the helper: image %s, hash %s", pod.Spec.Containers[0].Image, pod.Annotations[AnnSpecHash])
	}

	// Another run with the same spec adopts it.
	next := spec
	next.RunID = "run-2"
	again, created, err := EnsureHelper(ctx, c.Client, rec, next)
	if err != nil || created || again.UID != pod.UID {
		t.Fatalf("a re-run did not adopt the matching helper: created=%v err=%v", created, err)
	}
	// A change of spec (here: its resources) is another pod.
	bigger := next
	bigger.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	if HelperMatches(pod, bigger) {
		t.Fatal("a helper with other resources matches")
	}
}

func TestHelperNameBounded(t *testing.T) {
	long := strings.Repeat("very-long-node-name-", 10)
	n := HelperName("firmware", long, "1.2.3")
	if len(n) > 63 || !strings.HasPrefix(n, "rollbook-firmware-very-long") {
		t.Fatalf("helper name %q (%d chars)", n, len(n))
	}
	if HelperName("firmware", long+"x", "1.2.3") == n {
		t.Fatal("names of different long nodes collide")
	}
}

func TestWaitForDaemonSetPodReady(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "example.com/a"}}}},
		},
	}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := WaitForDaemonSetPodReady(ctx, c.Client, ns, "agent", "kwok-node-2")
	if err != nil || p.Spec.NodeName != "kwok-node-2" || !PodReady(p) {
		t.Fatalf("got %v, %v", p, err)
	}
	// A wait that cannot be satisfied ends with the context, not a hang.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := WaitForDaemonSetPodReady(short, c.Client, ns, "agent", "no-such-node"); err == nil {
		t.Fatal("wait for a pod on a missing node returned no error")
	}
}

func cordonByName(ctx context.Context, cs kubernetes.Interface, rec Recorder, node, owner, run string) (CordonState, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return CordonState{}, err
	}
	st, err := CordonNode(ctx, cs, rec, n, owner, run)
	if err == nil && st.Owner != "" {
		// No run holds a Lease here: say on the node why it is cordoned, as
		// a run that ends with a node cordoned must (the sim's monitor checks).
		_, err = MarkLeftCordoned(ctx, cs, node, "held by a pkg/kube test")
	}
	return st, err
}

func uncordonByName(ctx context.Context, cs kubernetes.Interface, rec Recorder, node, owner string) (CordonState, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return CordonState{}, err
	}
	return UncordonNode(ctx, cs, rec, n, owner)
}

// A wait for a pod that is already gone when it starts (deleted between its
// creation and the wait, by anyone) ends at once instead of waiting out its
// budget for a pod that will never come back.
func TestWaitForAPodAlreadyGoneEndsAtOnce(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	pods := c.Client.CoreV1().Pods(ns)
	unschedulable := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "helper"},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"rollbook.dev/no-such-node": "true"},
				Containers:   []corev1.Container{{Name: "c", Image: "busybox"}},
			},
		}
	}
	create := func() *corev1.Pod {
		p, err := pods.Create(ctx, unschedulable(), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	remove := func(p *corev1.Pod) {
		// Only this pod (its UID), and gone already is as good: a CI run
		// met NotFound here once, 20 ms in; what removed the pod first is
		// not known (the controller-manager's pod GC deletes by name).
		err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
			Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := WaitForPodGone(ctx, c.Client, ns, p.Name); err != nil {
			t.Fatal(err)
		}
	}
	first := create()
	remove(first)
	second := create()
	remove(second)
	for _, replaced := range []types.UID{"", first.UID} {
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := WaitForPodReplacing(waitCtx, c.Client, ns, "helper", replaced, PodTerminal)
		cancel()
		if !errors.Is(err, ErrGone) {
			t.Fatalf("wait (replacing %q) for a pod deleted before it started: %v; want ErrGone at once", replaced, err)
		}
	}
}

// A pod bound to the node after the caller evicted its own (a scheduler
// whose view lagged the cordon) matches what the wait waits for; without
// being told, the wait would outlast its budget for a pod nothing moves.
// WaitForNoPodsOrArrivals hands it back at once instead.
func TestWaitForNoPodsHandsBackALateArrival(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	const node = "kwok-node-3"
	pods := c.Client.CoreV1().Pods(ns)
	holder := func(name string, finalizers ...string) *corev1.Pod {
		p, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"holds": "yes"}, Finalizers: finalizers},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The evicted one stays Terminating (its finalizer) while the wait runs.
	const keep = "rollbook.dev/test-keeps-it"
	evicted := holder("evicted", keep)
	t.Cleanup(func() {
		_, _ = pods.Patch(context.Background(), evicted.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`),
			metav1.PatchOptions{})
	})
	if err := pods.Delete(ctx, evicted.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	match := func(p *corev1.Pod) bool { return p.Namespace == ns && p.Labels["holds"] == "yes" }
	arrived := func(p *corev1.Pod) bool { return p.UID != evicted.UID && Evictable(p) }
	type result struct {
		late []corev1.Pod
		err  error
	}
	got := make(chan result, 1)
	go func() {
		late, err := WaitForNoPodsOrArrivals(ctx, c.Client, node, match, arrived)
		got <- result{late, err}
	}()
	// Not handed back while only the evicted pod is left.
	select {
	case r := <-got:
		t.Fatalf("the wait ended with only the evicted pod left: %v, %v", r.late, r.err)
	case <-time.After(2 * time.Second):
	}
	late := holder("late")
	select {
	case r := <-got:
		if r.err != nil || len(r.late) != 1 || r.late[0].UID != late.UID {
			t.Fatalf("the wait handed back %d pod(s), %v; want the late one", len(r.late), r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a pod that arrived after the eviction kept the wait going")
	}
}
