//go:build e2e

// Package onenode rolls a single-node ate-fleet: the roll is a full stop
// there, so it needs --allow-full-stop.
package onenode

import (
	"os"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_TRAFFIC", "off")
	simtest.Main(m, simtest.Options{Nodes: 1, Scenario: "ate-fleet"})
}

func TestSingleNodeNeedsAllowFullStop(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.ExpectRefused(t, ctx, "--allow-full-stop", "roll", "next-node")
	atetest.ExpectRefused(t, ctx, "--allow-full-stop", "roll", "next-node", "--all")
	atetest.MustRun(t, ctx, "roll", "next-node", "--allow-full-stop")
	if got := atetest.NodeLabels(t, ctx)["kwok-node-0"]; got != atetest.NewV {
		t.Fatalf("kwok-node-0 at %s", got)
	}
	atetest.NoActorLost(t, ctx)
}
