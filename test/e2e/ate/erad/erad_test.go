//go:build e2e

// Package erad rolls and rolls back an ate-fleet whose control API is of
// era D: workers list their actors only through ListWorkerActorAssignments
// and report capacity and allocation counts.
package erad

import (
	"os"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet-d"})
}

func TestRollAndRollbackEraD(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	if s := atetest.Status(t, ctx); s.Capabilities == nil || s.Capabilities.Era != "D" {
		t.Fatalf("want an era D API, got %+v", s.Capabilities)
	}
	// Era D workers host several actors: the sim's report room for more
	// than one (traffic may have idled the two seeded on one worker).
	inv, err := atetest.Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range inv.Workers {
		if !w.Slots || w.CapacityActors < 2 {
			t.Fatalf("worker %s (%s) reports capacity %d (slots %v), want an era D multi-actor worker", w.Name, w.PoolKey(),
				w.CapacityActors, w.Slots)
		}
	}
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.ExpectRefused(t, ctx, "every serving pool has a clone pinned to NEW", "roll", "next-node")
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	if s := atetest.Status(t, ctx); s.Counts[atetest.NewV] != 3 || s.ActorsOnOldPools != 0 {
		t.Fatalf("after the roll: %s %v", s.Phase, s.Counts)
	}
	atetest.MustRun(t, ctx, "rollback", "--control-plane-reverted", "--wait")
	if s := atetest.Status(t, ctx); s.Phase != campaign.PhaseNotStarted || len(s.Nodes) != 0 {
		t.Fatalf("after the rollback: %s (%s) %v", s.Phase, s.Summary, s.Nodes)
	}
	atetest.NoActorLost(t, ctx)
}
