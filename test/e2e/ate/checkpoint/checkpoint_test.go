//go:build e2e

// Package checkpoint: a suspend checkpoints through the atelet of the
// worker's own node, so once a node's label is flipped with an actor still
// on an old-pool worker (the runbook's mistake, by hand), nothing can
// suspend it there; the roll must say what works (put the label back) and,
// once it is back, finish the node without losing the actor.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_TRAFFIC", "off") // the actor stays where it is
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

func TestSuspendNeedsTheWorkersAtelet(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	inv, err := atetest.Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var actor ateapi.Actor
	for _, a := range inv.Actors {
		if a.State == ateapi.ActorRunning && a.Node != "" {
			actor = a
			break
		}
	}
	if actor.Name == "" {
		t.Fatal("no RUNNING actor on a worker")
	}
	node := actor.Node
	t.Logf("actor %s/%s runs on worker %s on %s", actor.Atespace, actor.Name, actor.Worker, node)

	// One attempt per call: the refusal, not the retries, is under test.
	cfg := c.RESTConfig
	once, err := ateapi.Dial(ctx, ateapi.DialOptions{RESTConfig: cfg, Client: ateapi.ClientOptions{
		Retry: ateapi.RetryPolicy{MaxAttempts: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close()

	// The paused actors there are suspended first (a flip loses their local
	// snapshot: another rule, another test).
	for _, a := range inv.ActorsOnNode(node) {
		if a.State != ateapi.ActorPaused {
			continue
		}
		if _, err := once.SuspendActor(ctx, a.Atespace, a.Name); err != nil {
			t.Fatal(err)
		}
		for {
			got, err := once.GetActor(ctx, a.Atespace, a.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == ateapi.ActorSuspended {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The mistake: the label flips with the actor still on its old worker.
	label(t, ctx, node, atetest.NewV)
	waitAtelet(t, ctx, node, atetest.OldV, false)
	_, refused := once.SuspendActor(ctx, actor.Atespace, actor.Name)
	if !errors.Is(refused, ateapi.ErrUnavailable) || !strings.Contains(refused.Error(), "atelet on node "+node) {
		t.Fatalf("suspend of an actor whose node lost its atelet: %v, want Unavailable from the atelet on %s", refused, node)
	}

	out, code := atetest.Run(t, ctx, "roll", "next-node", node)
	if code != cli.ExitBlocked || !strings.Contains(out, "put the label back") {
		t.Fatalf("roll next-node %s after the flip by hand: exit %d, want %d and the advice to put the label back", node, code,
			cli.ExitBlocked)
	}
	if strings.Contains(out, "Suspend them (kubectl ate suspend") {
		t.Fatal("the roll advises a suspend that cannot work on this node")
	}

	// Taking the move back suspends the node's residents too, which cannot
	// work there now: the run stops, saying what works, with nothing lost.
	out, code = atetest.Run(t, ctx, "rollback", "next-node", node, "--wait")
	if code != cli.ExitBlocked || !strings.Contains(out, "No atelet of its worker's version answers on node "+node) {
		t.Fatalf("rollback next-node %s: exit %d, want %d and why the suspend cannot work", node, code, cli.ExitBlocked)
	}
	// Status, after that stop, names the node half-way and the exact next
	// command: the label back first, then the same rollback.
	st := atetest.Status(t, ctx)
	var halfway *campaign.NodeProgress
	for i := range st.Nodes {
		if st.Nodes[i].Node == node {
			halfway = &st.Nodes[i]
		}
	}
	fix := fmt.Sprintf("kubectl label node %s %s=%s --overwrite", node, fleet.VersionLabel, atetest.OldV)
	if halfway == nil || halfway.Direction != "rollback" || !strings.Contains(halfway.Next, fix) ||
		!strings.Contains(st.Next, fix) || !strings.Contains(st.Next, "kubectl ate rollback next-node "+node) {
		t.Fatalf("status after the rollback's stop: node %s %+v, next %q; want it half-way back with %q, then the rollback",
			node, halfway, st.Next, fix)
	}
	// Its advice: the label back, that atelet Ready, the same command again
	// (it deletes the new-pool pods that landed meanwhile); then the move.
	label(t, ctx, node, atetest.OldV)
	waitAtelet(t, ctx, node, atetest.OldV, true)
	atetest.MustRun(t, ctx, "rollback", "next-node", node, "--wait")
	if got := atetest.NodeLabels(t, ctx)[node]; got != atetest.OldV {
		t.Fatalf("node %s at %q after the rollback, want %s", node, got, atetest.OldV)
	}
	atetest.MustRun(t, ctx, "roll", "next-node", node, "--wait")
	if got := atetest.NodeLabels(t, ctx)[node]; got != atetest.NewV {
		t.Fatalf("node %s at %q after the re-run, want %s", node, got, atetest.NewV)
	}
	a, err := atetest.Client(t, ctx).GetActor(ctx, actor.Atespace, actor.Name)
	if err != nil || a.State == ateapi.ActorCrashed {
		t.Fatalf("actor %s/%s after the re-run: %+v, %v", actor.Atespace, actor.Name, a, err)
	}
	atetest.NoActorLost(t, ctx)
}

func label(t *testing.T, ctx context.Context, node, version string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, fleet.VersionLabel, version)
	if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAtelet waits until node has (ready) or has not a Ready atelet of
// version; a Terminating pod serves nothing.
func waitAtelet(t *testing.T, ctx context.Context, node, version string, ready bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		pods, err := simtest.Get(t).Client.CoreV1().Pods(fleet.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app=atelet," + fleet.VersionLabel + "=" + version, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if p.DeletionTimestamp == nil && cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					found = true
				}
			}
		}
		if found == ready {
			return
		}
	}
	t.Fatalf("node %s: a Ready %s atelet: want %v", node, version, ready)
}
