//go:build e2e

// Package handoff flips a node whose old atelet takes a while to exit: it
// holds the node's host ports (8085, 9090) meanwhile, so the scheduler keeps
// the new atelet Pending (ROLLBOOK_SIM_ATE_ATELET_HANDOFF). The roll's wait
// for the new atelet stops at its budget naming both pods; status then shows
// the node half-way at that step with the command that finishes it; nothing
// past the wait ran, and no actor was placed on the node meanwhile; the same
// command finishes the node once the old atelet is gone.
package handoff

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

const handoff = 40 * time.Second

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_ATELET_HANDOFF", handoff.String())
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

// flippedNode is the node the roll flipped and has not verified.
func flippedNode(t *testing.T, ctx context.Context) string {
	t.Helper()
	l, err := simtest.Get(t).Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Items {
		if n.Labels[fleet.VersionLabel] == atetest.NewV && n.Annotations[fleet.AnnVerifyPending] != "" {
			return n.Name
		}
	}
	t.Fatal("no node flipped and unverified")
	return ""
}

// podsOn lists the node's pods of the old pools and its atelet pods.
func podsOn(t *testing.T, ctx context.Context, node string) (oldPool, atelets []corev1.Pod) {
	t.Helper()
	l, err := simtest.Get(t).Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		switch {
		case p.Labels[fleet.PoolLabel] != "" && p.Spec.NodeSelector[fleet.VersionLabel] == atetest.OldV:
			oldPool = append(oldPool, p)
		case p.Labels[fleet.AppLabel] == fleet.AteletApp:
			atelets = append(atelets, p)
		}
	}
	return oldPool, atelets
}

func TestTheRollWaitsForTheNewAteletWhileTheOldHoldsTheHostPorts(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// 1. The wait for the new atelet has a budget and names what it waits on.
	out, code := atetest.Run(t, ctx, "roll", "next-node", "--atelet-timeout", "5s")
	if code == 0 {
		t.Fatalf("roll next-node with a 5s atelet budget and a %s hand-off: exit 0; want it to stop at the budget", handoff)
	}
	node := flippedNode(t, ctx)
	old, atelets := podsOn(t, ctx, node)
	oldAtelet := ""
	for _, p := range atelets {
		if p.Labels[fleet.VersionLabel] == atetest.OldV && p.DeletionTimestamp != nil {
			oldAtelet = p.Name
		}
	}
	if oldAtelet == "" {
		t.Fatalf("no Terminating %s atelet on %s: the hand-off window is not what this test is about", atetest.OldV, node)
	}
	for _, want := range []string{"ate.node.atelet-ready", oldAtelet, "host ports", "Pending, not scheduled"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the atelet wait's stop does not name %q", want)
		}
	}

	// 2. Nothing past the wait ran: the old-pool pods are all there.
	for _, p := range old {
		if p.DeletionTimestamp != nil {
			t.Fatalf("old-pool pod %s/%s deleted while no %s atelet is Ready on %s", p.Namespace, p.Name, atetest.NewV, node)
		}
	}
	if len(old) == 0 {
		t.Fatalf("no old-pool pod on %s", node)
	}
	// … and no actor was placed on the node's workers: none serves there.
	inv, err := atetest.Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range inv.Actors {
		if a.Node == node && a.Worker != "" {
			t.Fatalf("actor %s bound to worker %s on %s, where no atelet is Ready", a.Ref(), a.Worker, node)
		}
	}

	// 3. Status names the node half-way, its step, why, and the next command.
	s := atetest.Status(t, ctx)
	if len(s.Nodes) != 1 || s.Nodes[0].Node != node || s.Nodes[0].Direction != "roll" ||
		!strings.Contains(s.Nodes[0].Step, "ate.node.atelet-ready") || !strings.Contains(s.Nodes[0].Step, "host ports") ||
		s.Nodes[0].Next != "kubectl ate roll next-node" || s.Phase != campaign.PhaseRolling {
		t.Fatalf("status in the hand-off window: phase %s, %+v", s.Phase, s.Nodes)
	}

	// 4. The same command waits (default budget) and finishes the node.
	atetest.MustRun(t, ctx, "roll", "next-node")
	if s := atetest.Status(t, ctx); len(s.Nodes) != 0 || s.Counts[atetest.NewV] != 1 {
		t.Fatalf("after the re-run: %+v, %v", s.Nodes, s.Counts)
	}
	atetest.NoActorLost(t, ctx)
}
