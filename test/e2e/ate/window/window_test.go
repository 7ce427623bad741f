//go:build e2e

// Package window tests --window on the ate roll: outside its maintenance
// window `roll next-node --all` moves no node and takes no lock; a window
// that closes mid-roll lets the node in progress finish and starts no
// other, so no node is left half-way; in an open window the same command
// goes on.
package window

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

// counts are the nodes per version label, and those a move is on.
func counts(t *testing.T) (old, new, moving int) {
	t.Helper()
	s := atetest.Status(t, simtest.Context(t, time.Minute))
	for _, n := range s.Cluster.Nodes {
		if n.MovingTo != "" || n.VerifyPending != "" {
			moving++
		}
	}
	return s.Counts[atetest.OldV], s.Counts[atetest.NewV], moving
}

func TestWindowClosingMidRollLeavesNoNodeHalfWay(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	roll := func(extra ...string) (string, int) {
		return atetest.Run(t, ctx, append([]string{"roll", "next-node", "--all", "--wait"}, extra...)...)
	}

	out, code := roll("--window", simtest.DailyWindow(time.Now().Add(3*time.Hour)))
	if code != 0 || !strings.Contains(out, "outside the maintenance window") || !strings.Contains(out, "kubectl ate roll next-node") {
		t.Fatalf("outside the window: exit %d, want 0 saying so and what to re-run", code)
	}
	if old, _, moving := counts(t); old != 3 || moving != 0 {
		t.Fatalf("outside the window: %d of 3 nodes at %s, %d moving", old, atetest.OldV, moving)
	}
	if l, err := c.Client.CoordinationV1().Leases(fleet.Namespace).Get(ctx, fleet.LockName, metav1.GetOptions{}); err == nil &&
		l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		t.Errorf("outside the window the run took the lock: %s", *l.Spec.HolderIdentity)
	}

	// The window closes at a minute boundary: start a few seconds before
	// it, so the first node starts inside it, and soak after each node so
	// the next would start after it.
	end := simtest.SleepUntilWindowCloses(6 * time.Second)
	out, code = roll("--window", simtest.DailyWindow(end), "--soak", "10s")
	if code != 0 || !strings.Contains(out, "paused") || !strings.Contains(out, "it opens") {
		t.Errorf("the window closed mid-roll: exit %d, want 0 paused saying when it opens", code)
	}
	old, moved, moving := counts(t)
	if moving != 0 || moved == 0 || old == 0 {
		t.Errorf("after the window closed: %d at %s, %d at %s, %d half-way; want some of each side and none half-way",
			old, atetest.OldV, moved, atetest.NewV, moving)
	}

	// In a window open now the same command goes on.
	if _, code := roll("--window", simtest.DailyWindow(time.Now().Add(30*time.Minute))); code != 0 {
		t.Fatalf("re-run in an open window: exit %d", code)
	}
	if old, moved, moving := counts(t); moved != 3 || old != 0 || moving != 0 {
		t.Errorf("after the re-run: %d at %s, %d at %s, %d half-way", old, atetest.OldV, moved, atetest.NewV, moving)
	}
	atetest.NoActorLost(t, ctx)
}
