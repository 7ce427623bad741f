//go:build e2e

// Package askfirst rolls a node while the API server's authorization
// policy refuses the client's token a call the move makes (the sim's
// stand-in for a policy that grants reads but not a drain or a suspend).
// The refusal must come before the first write to the node, naming what
// to grant: found later, it leaves the node marked, its workers drained
// and its actors where they were (#42, "ask before you mark"). A node
// someone else cordoned is likewise refused before its mark, and picked
// last.
package askfirst

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_TRAFFIC", "off") // the actors stay where the test puts them
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

// The sim's annotation on svc/api's Deployment (sim/substrate).
const refusedAnnotation = "sim.rollbook.dev/refused-methods"

func TestARefusedCallStopsTheMoveBeforeTheNodeIsMarked(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// Each call the move makes, refused alone: the move names it and the
	// fix, and no node is marked, cordoned or drained.
	for _, method := range []string{"SuspendActor", "DrainWorker"} {
		refuse(t, ctx, method)
		out := atetest.ExpectRefused(t, ctx, method, "roll", "next-node")
		if !strings.Contains(out, "authorization policy") || !strings.Contains(out, "nothing was written to the node") {
			t.Fatalf("%s refused: the refusal does not name the fix:\n%s", method, out)
		}
		untouched(t, ctx, method)
	}

	// With the policy fixed the node rolls.
	refuse(t, ctx, "")
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	moved := 0
	for _, v := range atetest.NodeLabels(t, ctx) {
		if v == atetest.NewV {
			moved++
		}
	}
	if moved != 1 {
		t.Fatalf("%d nodes at %s after the fix, want 1", moved, atetest.NewV)
	}
	atetest.NoActorLost(t, ctx)
}

// A node a person cordoned (a repair) is not moved: named, the roll stops
// before its mark, saying who cordoned it and what to do; unnamed, the roll
// takes another node first.
func TestAPersonsCordonKeepsTheNodeFromMoving(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	var old []string
	for n, v := range atetest.NodeLabels(t, ctx) {
		if v == atetest.OldV {
			old = append(old, n)
		}
	}
	if len(old) < 2 {
		t.Fatalf("nodes at %s: %v, want two or more", atetest.OldV, old)
	}
	sort.Strings(old)
	repaired := old[0] // the picker's first choice by name
	setCordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, repaired, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setCordon(true)
	defer setCordon(false)

	out, code := atetest.Run(t, ctx, "roll", "next-node", repaired)
	if code != cli.ExitBlocked || !strings.Contains(out, "cordoned by someone other than rollbook") ||
		!strings.Contains(out, "nothing was written to it") {
		t.Fatalf("roll next-node %s, cordoned by a person: exit %d, want %d saying who cordoned it", repaired, code,
			cli.ExitBlocked)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, repaired, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, marked := n.Annotations[fleet.AnnMovingTo]; marked || n.Labels[fleet.VersionLabel] != atetest.OldV ||
		!n.Spec.Unschedulable || n.Annotations[kube.AnnCordonedBy] != "" {
		t.Fatalf("node %s after the refusal: marked %v, at %q, cordon %v by %q; want the person's node untouched", repaired,
			marked, n.Labels[fleet.VersionLabel], n.Spec.Unschedulable, n.Annotations[kube.AnnCordonedBy])
	}

	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	labels := atetest.NodeLabels(t, ctx)
	if labels[repaired] != atetest.OldV || labels[old[1]] != atetest.NewV {
		t.Fatalf("after roll next-node: %s at %q (cordoned by a person), %s at %q; want the other node moved",
			repaired, labels[repaired], old[1], labels[old[1]])
	}
	atetest.NoActorLost(t, ctx)
}

// untouched fails the test for any node marked or cordoned.
func untouched(t *testing.T, ctx context.Context, method string) {
	t.Helper()
	nodes, err := simtest.Get(t).Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if _, marked := n.Annotations[fleet.AnnMovingTo]; marked || n.Spec.Unschedulable {
			t.Fatalf("%s refused: node %s marked %v, cordoned %v; want untouched", method, n.Name, marked, n.Spec.Unschedulable)
		}
	}
}

// refuse sets the method the policy refuses ate-client ("" lifts it) and
// waits until the server applies it.
func refuse(t *testing.T, ctx context.Context, method string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, refusedAnnotation, method)
	if _, err := simtest.Get(t).Client.AppsV1().Deployments("ate-system").Patch(ctx, "ate-api-server", types.MergePatchType, []byte(patch),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	api := atetest.Client(t, ctx)
	for {
		// Calls on what does not exist: NotFound when allowed.
		_, serr := api.SuspendActor(ctx, "team-a", "no-such-actor")
		_, derr := api.DrainWorker(ctx, "no-such-worker")
		denied := map[string]bool{"SuspendActor": errors.Is(serr, ateapi.ErrPermissionDenied),
			"DrainWorker": errors.Is(derr, ateapi.ErrPermissionDenied)}
		if denied[method] == (method != "") && (method != "" || !denied["SuspendActor"] && !denied["DrainWorker"]) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the policy never applied %q: %v, %v", method, serr, derr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
