//go:build e2e

// Package deletewait holds a flipped node's old-pool pods Terminating — behind
// a finalizer, then on a node whose kubelet is down — and checks that the
// delete step (ate.node.delete-old-pods) stops within its budget or within
// seconds of the node going down, naming the pods and what holds them, and
// that the same command finishes the node once they go.
package deletewait

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	atenode "github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

const (
	finalizer = "example.com/hold"
	// notReady is the sim's "kubelet down" mark (sim/cluster/stages/node-not-ready.yaml).
	notReady = "sim.rollbook.dev/not-ready"
)

// oldPoolPod is one pod of an OldV pool on node, not being deleted.
func oldPoolPod(t *testing.T, ctx context.Context, node string) corev1.Pod {
	t.Helper()
	l, err := simtest.Get(t).Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		if p.Spec.NodeSelector[fleet.VersionLabel] == atetest.OldV && p.Labels[fleet.PoolLabel] != "" && p.DeletionTimestamp == nil &&
			p.Status.Phase == corev1.PodRunning {
			return p
		}
	}
	t.Fatalf("no old-pool pod left on %s", node)
	return corev1.Pod{}
}

func patchPod(t *testing.T, ctx context.Context, p corev1.Pod, patch map[string]any) {
	t.Helper()
	b, _ := json.Marshal(patch)
	if _, err := simtest.Get(t).Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, b,
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setNotReady(t *testing.T, ctx context.Context, node string, down bool) {
	t.Helper()
	var v any
	if down {
		v = "true"
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{notReady: v}}})
	if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// terminating checks that pod is there and Terminating (waiting for the
// deletion to show), and returns it.
func terminating(t *testing.T, ctx context.Context, p corev1.Pod) *corev1.Pod {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		q, err := simtest.Get(t).Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if q.DeletionTimestamp != nil {
			return q
		}
	}
	t.Fatalf("pod %s/%s never Terminating", p.Namespace, p.Name)
	return nil
}

func TestDeleteStepHasABudgetAndANodeDownCheck(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// 1. A finalizer holds one of the flipped node's old-pool pods: the
	// step stops at its budget, naming the pod and the finalizer.
	node := atetest.RollUntilFlipped(t, ctx)
	held := oldPoolPod(t, ctx, node)
	patchPod(t, ctx, held, map[string]any{"metadata": map[string]any{"finalizers": []string{finalizer}}})
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	out, code := atetest.Run(t, runCtx, "roll", "next-node", "--delete-timeout", "10s")
	late := runCtx.Err()
	cancel()
	if late != nil || code == 0 || !strings.Contains(out, held.Name) || !strings.Contains(out, finalizer) {
		t.Fatalf("the delete step with a finalizer: exit %d (context %v); want it to stop naming %s and %s", code, late,
			held.Name, finalizer)
	}
	if s := atetest.Status(t, ctx); len(s.Nodes) != 1 || s.Nodes[0].Node != node ||
		!strings.Contains(s.Nodes[0].Step, "ate.node.delete-old-pods") || !strings.Contains(s.Nodes[0].Step, finalizer) {
		t.Fatalf("status must show %s at the delete step, naming the finalizer: %+v", node, s.Nodes)
	}

	// 2. The same command waits on the held pod (default budget), and the
	// node's kubelet goes down meanwhile: the step stops within seconds,
	// blocked, naming the node.
	type result struct {
		out  string
		code int
	}
	ran := make(chan result, 1)
	runCtx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	go func() {
		out, code := atetest.Run(t, runCtx, "roll", "next-node")
		ran <- result{out, code}
	}()
	// The step's clock on the node says the wait has begun.
	key := runbook.TimerKey(atenode.RunbookName)
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(n.Annotations[key], "ate.node.delete-old-pods@") {
			break
		}
		select {
		case r := <-ran:
			t.Fatalf("the run ended (exit %d) before its delete step waited", r.code)
		case <-time.After(200 * time.Millisecond):
		}
	}
	setNotReady(t, ctx, node, true)
	r := <-ran
	if runCtx.Err() != nil || r.code != 3 || !strings.Contains(r.out, node) || !strings.Contains(r.out, "NotReady") ||
		!strings.Contains(r.out, held.Name) {
		t.Fatalf("the delete step with %s down: exit %d (context %v); want 3 naming the node NotReady and %s", node, r.code,
			runCtx.Err(), held.Name)
	}
	// Its finalizer removed, the held pod goes: the kubelet had finished
	// its part while the node was up. A pod whose deletion starts while the
	// kubelet is down stays Terminating: only the kubelet finishes it.
	patchPod(t, ctx, held, map[string]any{"metadata": map[string]any{"finalizers": nil}})
	probe := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"}, Spec: corev1.PodSpec{
		NodeName:    node,
		Containers:  []corev1.Container{{Name: "c", Image: "registry.example/probe:1"}},
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
	}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, &probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "probe", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	out, code = atetest.Run(t, runCtx, "roll", "next-node")
	late = runCtx.Err()
	cancel()
	if late != nil || code != 3 || !strings.Contains(out, "NotReady") {
		t.Fatalf("the roll with %s down: exit %d (context %v); want 3 naming the node NotReady", node, code, late)
	}
	terminating(t, ctx, probe) // still there, Terminating, seconds later

	// 3. The node is back: the same command finishes it, then the rest.
	setNotReady(t, ctx, node, false)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if _, err := c.Client.CoreV1().Pods("default").Get(ctx, "probe", metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe pod was not deleted once its node was back")
		}
	}
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	atetest.AllAt(t, ctx, atetest.NewV, "after --all")
	if s := atetest.Status(t, ctx); len(s.Nodes) != 0 {
		t.Fatalf("in progress after the roll: %+v", s.Nodes)
	}
	atetest.NoActorLost(t, ctx)
}
