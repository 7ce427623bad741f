//go:build e2e

// Package wedge stops a roll where nobody rehearsed it: the canary's new
// atelet never becomes Ready (its image cannot be pulled on the nodes'
// architecture; the runbook names the image cache's layout version as
// another cause), so the roll stops at atelet-ready with the node at NEW
// and its old-pool workers DRAINING next to no atelet at all. Status must
// name both ways out, and the rollback must finish from there: the node
// back at OLD, its drained workers replaced, no actor lost, the violations
// file empty.
package wedge

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

// newAtelet is the NEW atelet's image: the sim's registry holds it for
// arm64 only, and every node is amd64.
const newAtelet = "ghcr.io/agent-substrate/substrate/atelet:" + atetest.NewV

func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet", Env: []string{
		"ROLLBOOK_SIM_SINGLE_ARCH_IMAGES=" + newAtelet + "=arm64", "ROLLBOOK_SIM_ATE_EVICTION_WINDOW=3s"}})
}

func TestRollbackFromACanaryWhoseAteletNeverBecameReady(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// The canary: flipped, then the wait for its atelet runs out.
	out, code := atetest.Run(t, ctx, "roll", "next-node", "--atelet-timeout", "15s")
	if code == 0 || !strings.Contains(out, "atelet") {
		t.Fatalf("the roll should stop at the NEW atelet: exit %d", code)
	}
	labels := atetest.NodeLabels(t, ctx)
	canary := ""
	for n, v := range labels {
		if v == atetest.NewV {
			canary = n
		}
	}
	if canary == "" {
		t.Fatalf("no node flipped: %v", labels)
	}
	drained := 0
	for w := range atetest.Draining(t, ctx) {
		if strings.HasSuffix(w, " on "+canary+")") {
			drained++
		}
	}
	if drained == 0 {
		t.Fatalf("the canary %s should be left with its old-pool workers DRAINING", canary)
	}

	// Status: the node half-way at the atelet, the way on and the way back.
	s := atetest.Status(t, ctx)
	if len(s.Nodes) != 1 || s.Nodes[0].Node != canary || !strings.Contains(s.Nodes[0].Step, "ate.node.atelet-ready") {
		t.Fatalf("status should show %s half-way at the atelet: %+v", canary, s.Nodes)
	}
	if n := s.Nodes[0]; n.Next != "kubectl ate roll next-node" || !strings.Contains(n.Back, "kubectl ate rollback") {
		t.Fatalf("status should name the way on and the way back: next %q, back %q", n.Next, n.Back)
	}
	if !strings.Contains(s.Next, "kubectl ate rollback") {
		t.Fatalf("status's next command should offer the rollback too: %q", s.Next)
	}

	// The way back, with the NEW atelet still unable to run.
	atetest.MustRun(t, ctx, "rollback", "--wait", "--verify-timeout", "90s")
	atetest.AllAt(t, ctx, atetest.OldV, "after the rollback")
	s = atetest.Status(t, ctx)
	if s.Phase != campaign.PhaseNotStarted || len(s.Nodes) != 0 || s.Cluster.New != "" {
		t.Fatalf("after the rollback: phase %s, in progress %+v, NEW %q", s.Phase, s.Nodes, s.Cluster.New)
	}
	// The canary serves OLD again: no DRAINING worker of a live pod on it.
	time.Sleep(time.Second)
	inv, err := atetest.Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel,
		FieldSelector: "spec.nodeName=" + canary})
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live[string(p.UID)] = true
		}
	}
	active := 0
	for _, w := range inv.WorkersOnNode(canary) {
		if live[w.Name] && w.State == ateapi.WorkerDraining {
			t.Errorf("worker %s (pod %s) on %s still DRAINING after the rollback: the node serves nothing", w.Name, w.Pod, canary)
		}
		if live[w.Name] && w.State == ateapi.WorkerActive {
			active++
		}
	}
	t.Logf("%d ACTIVE worker(s) on %s after the rollback", active, canary)
	atetest.NoActorLost(t, ctx)
}
