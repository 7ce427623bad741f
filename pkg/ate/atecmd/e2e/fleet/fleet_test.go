// Package fleet rolls and rolls back a six-node ate-fleet: two namespaces
// (the same pool name in each), two sandbox classes, traffic on, and
// requires an empty violations file.
package fleet

import (
	"os"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/ate/atecmd/atetest"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 6, Scenario: "ate-fleet"})
}

func TestFullRollAndRollbackOnSixNodes(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 12*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "preflight")
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	s := atetest.Status(t, ctx)
	if s.Counts[atetest.NewV] != 6 || s.OldPoolPodsRunning != 0 || s.ActorsOnOldPools != 0 {
		t.Fatalf("after the roll: %s %v, %d old pods Running, %d actors on old workers", s.Phase, s.Counts, s.OldPoolPodsRunning, s.ActorsOnOldPools)
	}
	// The new pools spread over the nodes (each holds a fixed number of workers).
	spread := map[string]bool{}
	pods, err := ate.PoolPods(ctx, c.Client, s.Cluster.PoolsPinnedTo(atetest.NewV))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		spread[p.Spec.NodeName] = true
	}
	if len(spread) < 6 {
		t.Errorf("new-pool pods on %d node(s), want all 6", len(spread))
	}
	atetest.MustRun(t, ctx, "rollback", "--control-plane-reverted", "--wait")
	if s := atetest.Status(t, ctx); s.Phase != ate.PhaseNotStarted || s.Counts[atetest.OldV] != 6 || len(s.Nodes) != 0 {
		t.Fatalf("after the rollback: %s (%s) %v", s.Phase, s.Summary, s.Nodes)
	}
	atetest.NoActorLost(t, ctx)
}
