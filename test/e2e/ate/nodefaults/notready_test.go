//go:build e2e

// Package atenodefaults rolls a three-node ate-fleet while the first node
// rollbook cordons goes NotReady (the sim's sim.rollbook.dev/not-ready
// mark). The run either converges or stops with exit 1 or 3 naming why; no
// actor is lost, no cordon is left unexplained, and once the node is back
// the same command finishes the roll.
package atenodefaults

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/chaostest"
	"github.com/rollbook/rollbook/internal/simtest"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

func TestRollNodeGoesNotReady(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 12*time.Minute)
	bin, err := chaostest.BuildPlugin("kubectl-ate")
	if err != nil {
		t.Fatal(err)
	}
	p := &chaostest.Plugin{Bin: bin, Kubeconfig: c.Kubeconfig}
	check := func() {
		chaostest.CordonsSaySo(t, ctx, c.Client)
		atetest.NoActorLost(t, ctx)
	}
	atetest.DeployAtelet(t, atetest.NewV)
	chaostest.UntilDone(t, ctx, p, 3, check, atetest.CloneArgs...)
	chaostest.UntilDone(t, ctx, p, 3, check, "preflight")

	roll := []string{"roll", "next-node", "--all", "--wait"}
	downed := chaostest.DownAfterCordon(t, ctx, c.Client)
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	r := p.Run(runCtx, chaostest.KillPoint{}, roll...)
	cancel()
	down := <-downed
	if down == "" {
		t.Fatalf("no node was cordoned; run exited %d:\n%s", r.Code, r.Out)
	}
	why := chaostest.Blocker(r.Out)
	t.Logf("%s went NotReady after its cordon; the roll exited %d after %s: %s", down, r.Code, r.Took.Round(time.Millisecond), why)
	switch {
	case r.Code == 0:
	case (r.Code == 1 || r.Code == 3) && strings.Contains(why, down):
	default:
		t.Fatalf("roll exited %d after %s, want 0, or 1/3 naming the blocker and %s:\n%s", r.Code, r.Took.Round(time.Second), down, r.Out)
	}
	check()

	chaostest.BackUp(t, ctx, c.Client, down)
	stops := chaostest.UntilDone(t, ctx, p, 5, check, roll...)
	s := atetest.Status(t, ctx)
	if s.Counts[atetest.NewV] != 3 || s.OldPoolPodsRunning != 0 || s.ActorsOnOldPools != 0 {
		t.Errorf("after the roll: %s %v, %d old pods Running, %d actors on old workers", s.Phase, s.Counts, s.OldPoolPodsRunning,
			s.ActorsOnOldPools)
	}
	atetest.NoActorLost(t, ctx)
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	t.Logf("FIGURES ate node NotReady mid-roll: first run exit %d after %s (%s); after the node came back, %d more stop(s) %v, then done",
		r.Code, r.Took.Round(time.Millisecond), why, len(stops), stops)
}
