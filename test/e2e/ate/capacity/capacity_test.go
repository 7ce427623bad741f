//go:build e2e

// Package capacity rolls an era D fleet whose workers report their
// capacity long after they register, as an ateom does once it is up: a
// worker with its capacity unset is handed no actor upstream, so the
// canary is not verified until one of the new version's workers there
// reports it.
package capacity

import (
	"os"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	os.Setenv("ROLLBOOK_SIM_ATE_CAPACITY_DELAY", "25s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet-d"})
}

func TestTheCanaryServesOnlyOnceItsWorkersReportCapacity(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	labels := atetest.NodeLabels(t, ctx)
	canary := ""
	for n, v := range labels {
		if v == atetest.NewV {
			canary = n
		}
	}
	inv, err := atetest.Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := fleet.ObserveCluster(ctx, simtest.Get(t).Client, atetest.Dynamic(t))
	if err != nil {
		t.Fatal(err)
	}
	clones := map[string]bool{}
	for _, p := range c.PoolsPinnedTo(atetest.NewV) {
		clones[p.Key()] = true
	}
	serving := 0
	for _, w := range inv.WorkersOnNode(canary) {
		if clones[w.PoolKey()] && w.Serving() {
			serving++
		}
	}
	if serving == 0 {
		t.Fatalf("the canary %s was verified with no %s worker there serving (every one's capacity unset)", canary, atetest.NewV)
	}
	atetest.NoActorLost(t, ctx)
}
