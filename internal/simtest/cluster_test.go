//go:build e2e

package simtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/ptr"
)

// These tests prove the simulated cluster behaves like a real one in every
// way rollbook relies on.

func eventually(t *testing.T, ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestNodesReady(t *testing.T) {
	c := Get(t)
	ctx := Context(t, time.Minute)
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 3 {
		t.Fatalf("want 3 nodes, got %d", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		ready := false
		for _, cond := range n.Status.Conditions {
			ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
		}
		if !ready {
			t.Errorf("node %s is not Ready: %v", n.Name, n.Status.Conditions)
		}
	}
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil || v.GitVersion != "v1.37.2" {
		t.Errorf("server version = %v, %v; want v1.37.2 stamped in", v, err)
	}
}

func TestDaemonSetFollowsNodeLabel(t *testing.T) {
	c := Get(t)
	ctx := Context(t, 2*time.Minute)
	ns := c.NewNamespace(t)
	const label = "simtest.rollbook.dev/agent"
	nodes := []string{"kwok-node-0", "kwok-node-1"}
	for _, n := range nodes {
		setNodeLabel(t, ctx, c, n, label, ptr.To("true"))
		t.Cleanup(func() { setNodeLabel(t, context.Background(), c, n, label, nil) })
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{label: "true"},
					Containers:   []corev1.Container{{Name: "agent", Image: "example.com/agent:1"}},
				},
			},
		},
	}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podNodes := func(ctx context.Context) (map[string]bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				out[p.Spec.NodeName] = true
			}
		}
		return out, nil
	}
	eventually(t, ctx, "DaemonSet pods Ready on both labelled nodes", func(ctx context.Context) (bool, error) {
		got, err := podNodes(ctx)
		return err == nil && len(got) == 2 && got["kwok-node-0"] && got["kwok-node-1"], err
	})
	setNodeLabel(t, ctx, c, "kwok-node-1", label, ptr.To("false"))
	eventually(t, ctx, "DaemonSet pod leaves the relabelled node", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "kwok-node-1" {
				return false, nil
			}
		}
		return len(pods.Items) == 1, nil
	})
}

func TestDrainMovesPodsAndPDBBlocksEviction(t *testing.T) {
	c := Get(t)
	ctx := Context(t, 2*time.Minute)
	ns := c.NewNamespace(t)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// Keep the pods off the node we drain, so the PDB is met before the drain.
					Affinity:   notOnNode("kwok-node-2"),
					Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}},
				},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(3)),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "3 web pods Ready and the PDB observed", func(ctx context.Context) (bool, error) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.CurrentHealthy == 3 && p.Status.ObservedGeneration == p.Generation, err
	})
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	victim := pods.Items[0]

	// minAvailable 3 of 3: any eviction is over-eager and must get 429.
	err = c.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: ns}})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction under a PDB with no disruptions allowed: got %v, want 429 TooManyRequests", err)
	}

	// Relax the PDB, then drain the victim's node with kubectl's drain helper.
	patch := []byte(`{"spec":{"minAvailable":2}}`)
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "PDB allows one disruption", func(ctx context.Context) (bool, error) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.DisruptionsAllowed >= 1, err
	})
	node := victim.Spec.NodeName
	helper := &drain.Helper{
		Ctx: ctx, Client: c.Client, Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		GracePeriodSeconds: -1, Timeout: time.Minute, Out: os.Stderr, ErrOut: os.Stderr,
	}
	if err := drain.RunCordonOrUncordon(helper, mustNode(t, ctx, c, node), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drain.RunCordonOrUncordon(helper, mustNode(t, context.Background(), c, node), false) })
	if err := drain.RunNodeDrain(helper, node); err != nil {
		t.Fatalf("drain %s: %v", node, err)
	}
	eventually(t, ctx, fmt.Sprintf("3 web pods Ready again, none on drained %s", node), func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == node {
				return false, nil
			}
			if podReady(&p) {
				ready++
			}
		}
		return ready == 3, nil
	})
}

func TestPinnedPodsSucceedAndFail(t *testing.T) {
	c := Get(t)
	ctx := Context(t, time.Minute)
	ns := c.NewNamespace(t)
	for outcome, want := range map[string]corev1.PodPhase{"true": corev1.PodSucceeded, "false": corev1.PodFailed} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pinned-" + outcome, Namespace: ns,
				Labels: map[string]string{"sim.rollbook.dev/complete": outcome}},
			Spec: corev1.PodSpec{
				NodeName:      "kwok-node-1",
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "job", Image: "example.com/job:1"}},
			},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, "pod "+pod.Name+" reaches "+string(want), func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == want, err
		})
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func setNodeLabel(t *testing.T, ctx context.Context, c *Cluster, node, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("label %s: %v", node, err)
	}
}

func mustNode(t *testing.T, ctx context.Context, c *Cluster, name string) *corev1.Node {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func notOnNode(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node},
			}}}},
		},
	}}
}

// A pod the node lifecycle controller marked not Ready while its node was
// down is Ready again once the node is back, as a kubelet re-posting its
// status makes it (else a roll's verify waits on it forever).
func TestPodReadyAgainAfterItsNodeIsBack(t *testing.T) {
	c := Get(t)
	ctx := Context(t, 3*time.Minute)
	ns := c.NewNamespace(t)
	const node, notReady = "kwok-node-2", "sim.rollbook.dev/not-ready"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func(want bool) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning && podReady(p) == want, err
		}
	}
	nodeReady := func(want bool) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			for _, cond := range mustNode(t, ctx, c, node).Status.Conditions {
				if cond.Type == corev1.NodeReady {
					return (cond.Status == corev1.ConditionTrue) == want, nil
				}
			}
			return false, nil
		}
	}
	eventually(t, ctx, "pod Ready", ready(true))
	setNodeLabel(t, ctx, c, node, notReady, ptr.To("true"))
	t.Cleanup(func() { setNodeLabel(t, context.Background(), c, node, notReady, nil) })
	eventually(t, ctx, "node NotReady", nodeReady(false))
	// What the node lifecycle controller's MarkPodsNotReady does to a pod
	// bound while its node is not Ready (a worker pod placed just before the
	// not-ready taint): Ready=False, containers left ready. The real
	// controller does it only when it sees the binding after the node went
	// down and before kwok readies the pod, so the test does it itself.
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			p.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the pod stays not Ready while its node is down", ready(false))
	time.Sleep(3 * time.Second) // nothing may post Ready while the kubelet is down
	eventually(t, ctx, "the pod stays not Ready while its node is down", ready(false))
	setNodeLabel(t, ctx, c, node, notReady, nil)
	eventually(t, ctx, "node Ready again", nodeReady(true))
	eventually(t, ctx, "pod Ready again once its node is back", ready(true))
}
