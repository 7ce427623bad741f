//go:build e2e

// Package unregistered stops a roll where nobody rehearsed it: the
// canary's new-pool worker pods run but never register with the control
// plane, so the node is flipped and its move cannot be verified. Status
// must name both ways out; the rollback must take the node back with no
// actor lost, and once the workers register the roll must finish.
package unregistered

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet", Env: []string{"ROLLBOOK_SIM_ATE_EVICTION_WINDOW=3s"}})
}

// holdRegistration sets (or, with "", removes) the sim's per-pod
// registration lag on the clones' pods, through their Deployments' pod
// template: the WorkerPools stay as clone-pools made them.
func holdRegistration(t *testing.T, ctx context.Context, lag string) {
	t.Helper()
	l, err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	value := `null`
	if lag != "" {
		value = `"` + lag + `"`
	}
	// Recreate: the old pods, Pending or unregistered, never become
	// available, so a rolling update would never replace them.
	patch := []byte(`{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null},` +
		`"template":{"metadata":{"annotations":{"sim.rollbook.dev/register-delay":` + value + `}}}}}`)
	n := 0
	for _, u := range l.Items {
		if _, clone := u.GetAnnotations()[fleet.AnnClonedFrom]; !clone {
			continue
		}
		if _, err := simtest.Get(t).Client.AppsV1().Deployments(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType,
			patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no clone to hold")
	}
	// Until the rollout is through: every live pod of a clone as patched.
	clones := map[string]bool{}
	for _, u := range l.Items {
		if _, clone := u.GetAnnotations()[fleet.AnnClonedFrom]; clone {
			clones[u.GetNamespace()+"/"+u.GetName()] = true
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := simtest.Get(t).Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if clones[p.Namespace+"/"+p.Labels[fleet.PoolLabel]] && (p.Annotations["sim.rollbook.dev/register-delay"] != lag) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the clones' pods were not replaced: %v", err)
	}
}

func TestAWorkerThatNeverRegistersHasBothWaysOut(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	holdRegistration(t, ctx, "1h")

	// The canary: flipped, then the wait for its new workers runs out.
	out, code := atetest.Run(t, ctx, "roll", "next-node", "--wait", "--verify-timeout", "20s")
	if code == 0 || !strings.Contains(out, "regist") {
		t.Fatalf("the roll should stop at the verify, naming registration: exit %d", code)
	}
	canary := ""
	for n, v := range atetest.NodeLabels(t, ctx) {
		if v == atetest.NewV {
			canary = n
		}
	}
	if canary == "" {
		t.Fatal("no node flipped")
	}
	s := atetest.Status(t, ctx)
	if len(s.Nodes) != 1 || s.Nodes[0].Node != canary || !strings.Contains(s.Nodes[0].Step, "ate.node.verify") {
		t.Fatalf("status should show %s half-way at the verify: %+v", canary, s.Nodes)
	}
	if n := s.Nodes[0]; !strings.Contains(n.Next, "kubectl ate roll next-node") || !strings.Contains(n.Back, "kubectl ate rollback") {
		t.Fatalf("status should name the way on and the way back: next %q, back %q", n.Next, n.Back)
	}

	// The way back, with the new workers still unregistered: past
	// --register-timeout they are taken off the node before its flip.
	atetest.MustRun(t, ctx, "rollback", "next-node", canary, "--wait", "--verify-timeout", "90s", "--register-timeout", "10s")
	if v := atetest.NodeLabels(t, ctx)[canary]; v != atetest.OldV {
		t.Fatalf("%s at %s after its rollback", canary, v)
	}
	if n, err := simtest.Get(t).Client.CoreV1().Nodes().Get(ctx, canary, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("%s left cordoned after its rollback (%v)", canary, err)
	}
	if s := atetest.Status(t, ctx); len(s.Nodes) != 0 {
		t.Fatalf("after the node's rollback, still in progress: %+v", s.Nodes)
	}
	atetest.NoActorLost(t, ctx)

	// The way on once the workers register: every node.
	holdRegistration(t, ctx, "")
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	atetest.AllAt(t, ctx, atetest.NewV, "after the roll")
	atetest.NoActorLost(t, ctx)
}
