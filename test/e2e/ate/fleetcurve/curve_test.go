//go:build e2e

// Package fleetcurve measures what each node of an ate roll costs as the
// roll goes through a fleet with a big inventory: the last node must cost
// what the first did (nothing per node may list the fleet or the actors in
// Kubernetes). ROLLBOOK_FLEET_NODES (default 8) and
// ROLLBOOK_SIM_ATE_EXTRA_ACTORS (default 200 idle actors) size it;
// `make bench-fleet` runs 100 nodes and 2,000 actors.
package fleetcurve

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/apicount"
	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
)

func nodes() int {
	if n, err := strconv.Atoi(os.Getenv("ROLLBOOK_FLEET_NODES")); err == nil && n >= 4 {
		return n
	}
	return 8
}

func TestMain(m *testing.M) {
	if os.Getenv("ROLLBOOK_SIM_ATE_EXTRA_ACTORS") == "" {
		os.Setenv("ROLLBOOK_SIM_ATE_EXTRA_ACTORS", "200")
	}
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: nodes(), Scenario: "ate-fleet"})
}

// Each `roll next-node --wait` moves one node; its requests include the
// run's own start (lock, history, the control API's port-forward), the
// same for every node.
func TestNodeCostIsFlatAcrossTheFleet(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	n := nodes()
	ctx := simtest.Context(t, time.Duration(n)*30*time.Second+3*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	reqs, took := make([]int, n), make([]string, n)
	for i := range n {
		rc, stop := apicount.Start()
		start := time.Now()
		atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
		stop()
		reqs[i], took[i] = rc.Total(), fmt.Sprintf("%.2f", time.Since(start).Seconds())
		t.Logf("node %d: %s", i+1, rc.Breakdown())
	}
	t.Logf("%d nodes, %s idle actors besides the scenario's", n, os.Getenv("ROLLBOOK_SIM_ATE_EXTRA_ACTORS"))
	t.Logf("per-node requests (each a whole `roll next-node --wait`): %v", reqs)
	t.Logf("per-node seconds: %v", took)
	q := max(3, n/4)
	first, last := median(reqs[:q]), median(reqs[n-q:])
	t.Logf("median requests per node: first quarter %d, last quarter %d (flat within ±20 %%)", first, last)
	if float64(last) > 1.2*float64(first) || float64(last) < 0.8*float64(first) {
		t.Errorf("per-node cost is not flat: first quarter's median %d, last quarter's %d: %v", first, last, reqs)
	}
	atetest.NoActorLost(t, ctx)
}

func median(v []int) int {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
