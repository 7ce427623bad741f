//go:build e2e

// Package halfway leaves nodes where an interrupted run leaves them — the
// move recorded on the node and nothing else done yet, one way and then the
// other — and checks that `kubectl ate status` and the command that acts
// next agree on the node: status names it, its way and the command that
// finishes it; that command takes it, and nothing else is touched first.
package halfway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/recordtest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	atenode "github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

// markMoving writes what the node runbook's first step writes before
// anything on the node changes: a run killed right after it leaves exactly
// this.
func markMoving(t *testing.T, ctx context.Context, node, to string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		fleet.AnnMovingTo: to, atenode.AnnResidents: ""}}})
	if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// inProgress is the one node status shows half-way.
func inProgress(t *testing.T, ctx context.Context) (campaign.Status, campaign.NodeProgress) {
	t.Helper()
	s := atetest.Status(t, ctx)
	if len(s.Nodes) != 1 {
		t.Fatalf("status shows %d node(s) in progress, want 1: %+v", len(s.Nodes), s.Nodes)
	}
	return s, s.Nodes[0]
}

func TestStatusAndTheNextCommandAgreeOnTheHalfwayNode(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// A roll killed between recording kwok-node-1's move and its first
	// DrainWorker. It is not the first node by name: a pick that ignored
	// the mark would take kwok-node-0.
	markMoving(t, ctx, "kwok-node-1", atetest.NewV)
	s, n := inProgress(t, ctx)
	if n.Node != "kwok-node-1" || n.Direction != "roll" || !strings.Contains(n.Step, "ate.node.drain") ||
		n.Next != "kubectl ate roll next-node" || s.Phase != campaign.PhaseRolling {
		t.Fatalf("status after a roll killed after its mark: phase %s, %+v", s.Phase, n)
	}
	if out := atetest.MustRun(t, ctx, "roll", "next-node", "--dry-run"); !strings.Contains(out, "node kwok-node-1:") {
		t.Fatalf("the dry run does not plan kwok-node-1, the node status shows half-way")
	}
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	labels := atetest.NodeLabels(t, ctx)
	if labels["kwok-node-1"] != atetest.NewV || labels["kwok-node-0"] != atetest.OldV || labels["kwok-node-2"] != atetest.OldV {
		t.Fatalf("after next-node: %v; want only kwok-node-1 moved", labels)
	}
	if s := atetest.Status(t, ctx); len(s.Nodes) != 0 {
		t.Fatalf("a moved node is still shown in progress: %+v", s.Nodes)
	}

	// A rollback killed right after recording kwok-node-1's move back.
	markMoving(t, ctx, "kwok-node-1", atetest.OldV)
	s, n = inProgress(t, ctx)
	if n.Node != "kwok-node-1" || n.Direction != "rollback" || n.Next != "kubectl ate rollback next-node" ||
		s.Phase != campaign.PhaseRollingBack || !strings.Contains(s.Next, "rollback next-node") {
		t.Fatalf("status after a rollback killed after its mark: phase %s, next %q, %+v", s.Phase, s.Next, n)
	}
	// The roll may not take another node out of service meanwhile: named,
	// another node is refused, naming the half-way node and both ways on.
	if n.Back != "kubectl ate roll next-node" {
		t.Fatalf("status should name the way back from the rollback's stop: %q", n.Back)
	}
	atetest.ExpectRefused(t, ctx, "node kwok-node-1 is half-moved", "roll", "next-node", "kwok-node-0")
	node0, err := c.Client.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
	if err != nil || node0.Spec.Unschedulable || node0.Annotations[fleet.AnnMovingTo] != "" {
		t.Fatalf("the refused roll touched kwok-node-0: %v %+v", err, node0)
	}
	atetest.MustRun(t, ctx, "rollback", "next-node", "--wait")
	labels = atetest.NodeLabels(t, ctx)
	for node, v := range labels {
		if v != atetest.OldV {
			t.Fatalf("after rollback next-node: %v; want every node at %s", labels, atetest.OldV)
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || kube.CordonStateOf(n).Cordoned || n.Annotations[fleet.AnnMovingTo] != "" {
			t.Fatalf("%s left cordoned or marked: %v %v", node, err, n.Annotations)
		}
	}
	if s := atetest.Status(t, ctx); len(s.Nodes) != 0 || s.Phase != campaign.PhaseCloned {
		t.Fatalf("after the rollback of the node: phase %s, in progress %+v", s.Phase, s.Nodes)
	}
	atetest.NoActorLost(t, ctx)
}

// A roll killed deep inside kwok-node-2's move, before its flip: the move
// recorded, every worker on the node DRAINING with its actors still on
// them (the suspend step had not finished), and the flip's cordon on. The
// rollback takes that node back to serving OLD — its drained workers
// replaced, the cordon and the mark lifted, no actor lost — before it
// deletes the clones and the NEW atelet.
func TestRollbackTakesBackANodeAnInterruptedRollLeftHalfway(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	const node = "kwok-node-2"
	api := atetest.Client(t, ctx)
	inv, err := api.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	markMoving(t, ctx, node, atetest.NewV)
	drained := map[string]bool{}
	for _, w := range inv.WorkersOnNode(node) {
		if _, err := api.DrainWorker(ctx, w.Name); err != nil {
			t.Fatal(err)
		}
		drained[w.Name] = true
	}
	if len(drained) == 0 {
		t.Fatalf("no worker on %s to drain", node)
	}
	// The flip cordons a node only once its suspend step emptied it: the
	// actors on the drained workers are suspended (and stay so: a drained
	// worker takes no actor).
	// An actor in a transition (RESUMING) refuses a suspend until it is
	// RUNNING again, as the roll's own suspend step waits for it.
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		inv, err := api.Inventory(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		all := true
		for _, a := range inv.Actors {
			if drained[a.Worker] && a.State != ateapi.ActorSuspended {
				all = false
				if _, err := api.SuspendActor(ctx, a.Atespace, a.Name); err != nil {
					last = fmt.Errorf("suspend %s/%s: %w", a.Atespace, a.Name, err)
				}
			}
		}
		return all, nil
	}); err != nil {
		t.Fatalf("the drained workers' actors are not all suspended: %v (last: %v)", err, last)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CordonNode(ctx, c.Client, &recordtest.Recorder{}, n, atenode.CordonOwner, "killed-roll"); err != nil {
		t.Fatal(err)
	}
	// What a stopped run says about the cordon it leaves.
	if _, err := kube.MarkLeftCordoned(ctx, c.Client, node, "the roll was interrupted inside the flip"); err != nil {
		t.Fatal(err)
	}
	if _, p := inProgress(t, ctx); p.Node != node || p.Direction != "roll" {
		t.Fatalf("status after the killed roll: %+v", p)
	}

	atetest.MustRun(t, ctx, "rollback", "--wait")

	labels := atetest.NodeLabels(t, ctx)
	for name, v := range labels {
		if v != atetest.OldV {
			t.Fatalf("after the rollback: %v; want every node at %s", labels, atetest.OldV)
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || n.Spec.Unschedulable || n.Annotations[fleet.AnnMovingTo] != "" || n.Annotations[atenode.AnnResidents] != "" {
			t.Fatalf("%s left cordoned or marked: %v %v", name, err, n.Annotations)
		}
	}
	// No pod on the node still belongs to a drained worker: there is no
	// undrain, so each was replaced.
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel,
		FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if drained[string(p.UID)] && p.DeletionTimestamp == nil {
			t.Errorf("pod %s/%s of a drained worker is still on %s", p.Namespace, p.Name, node)
		}
	}
	s := atetest.Status(t, ctx)
	if len(s.Nodes) != 0 || s.Phase != campaign.PhaseNotStarted {
		t.Fatalf("after the rollback: phase %s, in progress %+v", s.Phase, s.Nodes)
	}
	atetest.NoActorLost(t, ctx)
}
