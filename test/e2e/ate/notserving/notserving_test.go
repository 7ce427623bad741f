//go:build e2e

// Package notserving checks that nothing is weighed that cannot serve:
// the substrate keeps a worker ACTIVE until its pod is deleted, also while
// its node is NotReady (its kubelet down) — such a worker takes no actor,
// so it is neither free capacity for the next node's actors nor serving;
// and a wait on such a node's pods stops, naming it.
package notserving

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
)

func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet", Env: []string{"ROLLBOOK_SIM_ATE_EVICTION_WINDOW=3s"}})
}

// setNotReady holds node NotReady (the sim's kubelet-down mark), or lets it
// be Ready again.
func setNotReady(t *testing.T, ctx context.Context, node string, down bool) {
	t.Helper()
	var v any = "true"
	if !down {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"sim.rollbook.dev/not-ready": v}}})
	if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// personCordon cordons node as a person's kubectl cordon does (no
// rollbook annotation), or uncordons it.
func personCordon(t *testing.T, ctx context.Context, node string, on bool) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": on}})
	if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A node whose kubelet is down is out of service already: the roll takes
// one node out at a time, so it moves no other node, the canary included
// (which no capacity guard holds), until that node is back or a person
// takes it out of the count with a cordon. It used to move the canary,
// two nodes out under a one-node budget.
func TestANotReadyNodeHoldsTheRoll(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	const down = "kwok-node-1"
	setNotReady(t, ctx, down, true)
	t.Cleanup(func() { setNotReady(t, context.Background(), down, false) })
	nodeNotReady(t, ctx, down)

	out := atetest.ExpectRefused(t, ctx, "already out of service", "roll", "next-node")
	if !strings.Contains(out, down) || !strings.Contains(out, "kubectl cordon") {
		t.Errorf("the refusal should name %s and the way on", down)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, marked := n.Annotations[fleet.AnnMovingTo]; marked || n.Spec.Unschedulable {
		t.Fatalf("the refused roll wrote to kwok-node-0: %v, unschedulable %v", n.Annotations, n.Spec.Unschedulable)
	}

	// Status says what holds the roll and the way on, not a next-node
	// that would refuse.
	if st := atetest.Status(t, ctx); !strings.Contains(st.Summary, down) || !strings.Contains(st.Next, "kubectl cordon") {
		t.Errorf("status should name %s as holding the roll and the way on: %q; next %q", down, st.Summary, st.Next)
	}

	// A person's cordon takes the node out of the count: the roll would
	// go on with the canary.
	personCordon(t, ctx, down, true)
	t.Cleanup(func() { personCordon(t, context.Background(), down, false) })
	if out := atetest.MustRun(t, ctx, "roll", "next-node", "--dry-run"); !strings.Contains(out, "kwok-node-0") {
		t.Errorf("with %s cordoned by a person the roll should plan the canary kwok-node-0", down)
	}
	personCordon(t, ctx, down, false)
	setNotReady(t, ctx, down, false)
	nodeReadyAgain(t, ctx, down)
}

func TestWorkersOfANotReadyNodeAreNotCapacity(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	if got := atetest.NodeLabels(t, ctx)["kwok-node-0"]; got != atetest.NewV {
		t.Fatalf("the canary kwok-node-0 is at %s", got)
	}
	// The next node must hold actors for capacity to be weighed: the
	// traffic may have woken every actor the canary suspended onto the
	// canary's new workers.
	actorOn(t, ctx, "kwok-node-1", "kwok-node-0")
	// The canary's kubelet goes down: its clone workers stay ACTIVE in the
	// substrate, but they are the only new-pool workers anywhere. A person
	// cordons it for repair, so it is not the roll's out-of-service count.
	setNotReady(t, ctx, "kwok-node-0", true)
	t.Cleanup(func() { setNotReady(t, context.Background(), "kwok-node-0", false) })
	personCordon(t, ctx, "kwok-node-0", true)
	t.Cleanup(func() { personCordon(t, context.Background(), "kwok-node-0", false) })
	nodeNotReady(t, ctx, "kwok-node-0")

	out := atetest.ExpectRefused(t, ctx, "not enough free actor slots", "roll", "next-node")
	if !strings.Contains(out, "not counted") || !strings.Contains(out, "kwok-node-0") {
		t.Errorf("the refusal should name the workers it did not count and why")
	}
	// Status agrees: the pods' Ready condition follows the node only when
	// the node lifecycle controller saw a kubelet stop posting, and the
	// sim's kubelet posts NotReady itself, so status reads the nodes'
	// Ready column (a Table of cells) beside their metadata.
	if s := atetest.Status(t, ctx); s.FreeNewWorkers != 0 {
		t.Errorf("status counts %d free new-pool workers; the only ones are on NotReady kwok-node-0", s.FreeNewWorkers)
	}

	// Back up, the same command goes on.
	personCordon(t, ctx, "kwok-node-0", false)
	setNotReady(t, ctx, "kwok-node-0", false)
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait", "--wait-timeout", "3m")
	atetest.AllAt(t, ctx, atetest.NewV, "after the NotReady node came back")
	atetest.NoActorLost(t, ctx)
}

// nodeNotReady waits until node's Ready condition is not True (the sim's
// kubelet posts it once the label is set).
func nodeNotReady(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	cs := simtest.Get(t).Client
	// NotReady and staying so: a heartbeat kwok computed before the label
	// may still land and set Ready once more (on a loaded machine the
	// window is seconds), and the pick must not read the node between.
	var since time.Time
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || kube.NodeReady(n) {
			since = time.Time{}
			return false, nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= 3*time.Second, nil
	}); err != nil {
		t.Fatalf("%s never went NotReady: %v", node, err)
	}
}

// nodeReadyAgain waits until node's Ready condition is True.
func nodeReadyAgain(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	cs := simtest.Get(t).Client
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && kube.NodeReady(n), nil
	}); err != nil {
		t.Fatalf("%s never came back Ready: %v", node, err)
	}
}

// actorOn waits until an actor RUNNING on node needs a place elsewhere,
// suspending one actor on from each few seconds so the traffic wakes it
// onto a worker picked at random (node's old workers among them).
func actorOn(t *testing.T, ctx context.Context, node, from string) {
	t.Helper()
	api := atetest.Client(t, ctx)
	nudged := time.Time{}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		inv, err := api.Inventory(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // retried until the poll's deadline
		}
		var on *ateapi.Actor
		for i, a := range inv.Actors {
			if a.State != ateapi.ActorRunning {
				continue
			}
			switch a.Node {
			case node:
				return true, nil
			case from:
				on = &inv.Actors[i]
			}
		}
		if on != nil && time.Since(nudged) > 6*time.Second {
			nudged = time.Now()
			_, _ = api.SuspendActor(ctx, on.Atespace, on.Name) // the traffic wakes it somewhere
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no actor came to live on %s: %v", node, err)
	}
}

// recover-node's wait for the deleted worker pods stops within seconds on
// a node whose kubelet is down (the pods stay Terminating until it is
// back), naming the node, where it used to wait without a bound; back up,
// the same command finishes (#42 item 6).
func TestRecoverNodeStopsOnANodeDown(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	const node = "kwok-node-1"
	api := atetest.Client(t, ctx)
	// The roll before may have left node's new workers registering or
	// holding actors it moved; wait until one is ACTIVE and idle.
	var idle []string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		inv, err := api.Inventory(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // retried until the poll's deadline
		}
		idle = idle[:0]
		for _, w := range inv.WorkersOnNode(node) {
			if w.State == ateapi.WorkerActive && len(w.Actors) == 0 { // idle: nothing to suspend on a node that is down
				idle = append(idle, w.Name)
			}
		}
		return len(idle) > 0, nil
	}); err != nil {
		t.Fatalf("no idle worker on %s to drain: %v", node, err)
	}
	for _, w := range idle {
		if _, err := api.DrainWorker(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	setNotReady(t, ctx, node, true)
	t.Cleanup(func() { setNotReady(t, context.Background(), node, false) })
	nodeNotReady(t, ctx, node)

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, code := atetest.Run(t, rctx, "recover-node", node)
	if code != cli.ExitBlocked || !strings.Contains(out, "node "+node+" is NotReady") || !strings.Contains(out, "bring the node back") {
		t.Fatalf("recover-node %s with its kubelet down: exit %d, want %d naming the node and the fix", node, code, cli.ExitBlocked)
	}

	setNotReady(t, ctx, node, false)
	atetest.MustRun(t, ctx, "recover-node", node)
	atetest.NoActorLost(t, ctx)
}
