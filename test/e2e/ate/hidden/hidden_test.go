//go:build e2e

// Package hidden rolls a node while the API server's authorization policy
// keeps an atespace from the client's token (the sim's stand-in for the
// embedded OpenFGA policy): its actor calls are PermissionDenied and the
// list over every atespace leaves its actors out. A paused actor of that
// atespace on the node is then invisible: the roll must refuse the node,
// naming the atespace and the fix, not flip it and lose the actor.
package hidden

import (
	"context"
	"errors"
	"fmt"
	"os"
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
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_TRAFFIC", "off") // the actors stay where the test puts them
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

const (
	space = "team-a"
	// The sim's annotation on svc/api's Deployment (sim/substrate).
	hiddenAnnotation = "sim.rollbook.dev/hidden-atespaces"
)

// TestAnAtespaceOnlyTheListNamesIsAskedFirst hides an atespace no worker
// names: its running actor is suspended, so only a paused actor with its
// snapshot on the node is left, and every list the client may read leaves
// it out. ListAtespaces (served whoever asks, as upstream's) still names
// the atespace, so the move asks to list and suspend there before its
// first write and stops, naming the calls to grant. Without it the node
// flipped and the paused actor was lost. It runs first: it leaves the
// fleet as it found it.
func TestAnAtespaceOnlyTheListNamesIsAskedFirst(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	api := atetest.Client(t, ctx)
	paused, running := actorsOf(t, ctx, api)
	node := paused.AssignedNode
	suspend(t, ctx, api, running)

	hide(t, ctx, space)
	out, code := atetest.Run(t, ctx, "roll", "next-node", node)
	if code != cli.ExitBlocked || !strings.Contains(out, "ListActors in atespace "+space) ||
		!strings.Contains(out, "nothing was written") {
		t.Fatalf("roll next-node %s with %s hidden and named by no worker: exit %d, want %d naming ListActors in %s",
			node, space, code, cli.ExitBlocked, space)
	}
	untouched(t, ctx, node)
	hide(t, ctx, "")
	if a, err := api.GetActor(ctx, space, paused.Name); err != nil || a.State != ateapi.ActorPaused {
		t.Fatalf("%s/%s after the refusal: %+v, %v; want PAUSED as it was", space, paused.Name, a, err)
	}
	// As found: the running actor runs again (off node, as the next test
	// wants; any node will do for this one).
	if _, _, err := api.ResumeActor(ctx, space, running.Name); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, api, running.Name, ateapi.ActorRunning)
}

func TestAnAtespaceTheTokenMayNotReadKeepsTheNodeFromFlipping(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	api := atetest.Client(t, ctx)

	// team-a has a paused actor (local snapshot on node) and a running one;
	// the running one is moved to another node, so that on node only the
	// paused one lives: no worker there names it.
	paused, running := actorsOf(t, ctx, api)
	node := paused.AssignedNode
	for i := 0; running.Node == node || running.Node == ""; i++ {
		if i == 20 {
			t.Fatalf("%s/%s never resumed off node %s", space, running.Name, node)
		}
		suspend(t, ctx, api, running)
		if _, _, err := api.ResumeActor(ctx, space, running.Name); err != nil {
			t.Fatal(err)
		}
		running = waitState(t, ctx, api, running.Name, ateapi.ActorRunning)
	}
	t.Logf("%s/%s paused on %s; %s/%s runs on %s", space, paused.Name, node, space, running.Name, running.Node)

	hide(t, ctx, space)
	if _, err := api.GetActor(ctx, space, paused.Name); !errors.Is(err, ateapi.ErrPermissionDenied) {
		t.Fatalf("GetActor in the hidden atespace: %v, want PermissionDenied", err)
	}
	if as, err := api.ListActors(ctx, ""); err != nil || hasSpace(as) {
		t.Fatalf("ListActors over every atespace: %d actors, %v; want a list without %s", len(as), err, space)
	}

	out, code := atetest.Run(t, ctx, "roll", "next-node", node)
	if code != cli.ExitBlocked || !strings.Contains(out, "atespace(s) "+space) || !strings.Contains(out, "authorization policy") {
		t.Fatalf("roll next-node %s with %s hidden: exit %d, want %d naming the atespace and the fix", node, space, code,
			cli.ExitBlocked)
	}
	untouched(t, ctx, node)
	// Status says the same, and claims nothing about actors it cannot see.
	s := atetest.Status(t, ctx)
	if !strings.Contains(s.Summary, space) || !strings.Contains(s.Next, "allow the client's identity") {
		t.Fatalf("status with %s hidden: %q / next %q; want the atespace named and the fix first", space, s.Summary, s.Next)
	}

	// With the policy fixed the node rolls, the paused actor suspended.
	hide(t, ctx, "")
	atetest.MustRun(t, ctx, "roll", "next-node", node, "--wait")
	if got := atetest.NodeLabels(t, ctx)[node]; got != atetest.NewV {
		t.Fatalf("node %s at %q after the fix, want %s", node, got, atetest.NewV)
	}
	if a, err := api.GetActor(ctx, space, paused.Name); err != nil || a.State == ateapi.ActorCrashed {
		t.Fatalf("%s/%s after the roll: %+v, %v", space, paused.Name, a, err)
	}
	atetest.NoActorLost(t, ctx)
}

// untouched fails unless a refused move left node as it was: at OLD,
// unmarked, uncordoned, and no worker draining.
func untouched(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	n, err := simtest.Get(t).Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, marked := n.Annotations[fleet.AnnMovingTo]; marked || n.Spec.Unschedulable || n.Labels[fleet.VersionLabel] != atetest.OldV {
		t.Fatalf("node %s after the refusal: marked %v, cordoned %v, at %s; want untouched", node, marked, n.Spec.Unschedulable,
			n.Labels[fleet.VersionLabel])
	}
	for w, d := range atetest.Draining(t, ctx) {
		if d {
			t.Fatalf("worker %s draining after the refusal", w)
		}
	}
}

func actorsOf(t *testing.T, ctx context.Context, api *ateapi.Client) (paused, running ateapi.Actor) {
	t.Helper()
	inv, err := api.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range inv.Actors {
		switch {
		case a.Atespace != space:
		case a.State == ateapi.ActorPaused && a.AssignedNode != "":
			paused = a
		case a.State == ateapi.ActorRunning:
			running = a
		}
	}
	if paused.Name == "" || running.Name == "" {
		t.Fatalf("the fleet has no paused and running actor in %s", space)
	}
	return paused, running
}

func hasSpace(as []ateapi.Actor) bool {
	for _, a := range as {
		if a.Atespace == space {
			return true
		}
	}
	return false
}

func suspend(t *testing.T, ctx context.Context, api *ateapi.Client, a ateapi.Actor) {
	t.Helper()
	for {
		_, err := api.SuspendActor(ctx, space, a.Name)
		var ae *ateapi.Error
		if err == nil || !errors.As(err, &ae) || !ae.ActorState.Transient() {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(200 * time.Millisecond) // RESUMING refuses a suspend until it ends
	}
	waitState(t, ctx, api, a.Name, ateapi.ActorSuspended)
}

func waitState(t *testing.T, ctx context.Context, api *ateapi.Client, name string, want ateapi.ActorState) ateapi.Actor {
	t.Helper()
	for {
		a, err := api.GetActor(ctx, space, name)
		if err != nil {
			t.Fatal(err)
		}
		if a.State == want {
			return a
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s/%s never %s (is %s)", space, name, want, a.State)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// hide sets the atespaces the policy keeps from ate-client ("" lifts it)
// and waits until the server applies it.
func hide(t *testing.T, ctx context.Context, spaces string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, hiddenAnnotation, spaces)
	if _, err := simtest.Get(t).Client.AppsV1().Deployments("ate-system").Patch(ctx, "ate-api-server", types.MergePatchType, []byte(patch),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	api := atetest.Client(t, ctx)
	for {
		_, err := api.ListActors(ctx, space)
		if errors.Is(err, ateapi.ErrPermissionDenied) == (spaces != "") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the policy never applied %q: %v", spaces, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
