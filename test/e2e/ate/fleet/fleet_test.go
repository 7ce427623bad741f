//go:build e2e

// Package fleet rolls and rolls back a six-node ate-fleet, then rolls it node by node measuring each node's cost: two namespaces
// (the same pool name in each), two sandbox classes, traffic on, and
// requires an empty violations file.
package fleet

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/httpcount"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/paced"
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
		t.Fatalf("after the roll: %s %v, %d old pods Running, %d actors on old workers", s.Phase, s.Counts, s.OldPoolPodsRunning,
			s.ActorsOnOldPools)
	}
	// Each node holds 4 workers, so the new pools' 18 pods spread over the
	// nodes as they flip: all of them fit on the first five.
	perNode := map[string]int{}
	pods, err := fleet.PoolPods(ctx, c.Client, s.Cluster.PoolsPinnedTo(atetest.NewV))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
	}
	for node, n := range perNode {
		if n > 4 {
			t.Errorf("%d new-pool pods on %s, which has room for 4", n, node)
		}
	}
	if len(pods) != 18 || len(perNode) < 5 {
		t.Errorf("%d new-pool pods on %d node(s) (%v), want 18 on at least 5", len(pods), len(perNode), perNode)
	}
	atetest.MustRun(t, ctx, "rollback", "--control-plane-reverted", "--wait")
	if s := atetest.Status(t, ctx); s.Phase != campaign.PhaseNotStarted || s.Counts[atetest.OldV] != 6 || len(s.Nodes) != 0 {
		t.Fatalf("after the rollback: %s (%s) %v", s.Phase, s.Summary, s.Nodes)
	}
	atetest.NoActorLost(t, ctx)
}

// The roll's own cost per node, measured node by node: the Kubernetes API
// requests and the time of each `roll next-node --wait`. Nothing per node
// may grow with the fleet, so the last node costs what the first did.
// Runs after the full roll and rollback, on the fleet back at OLD.
func TestPerNodeCost(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 12*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	var mu sync.Mutex
	counts, timed := map[string]int{}, map[string]int{}
	total := 0
	cli.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return httpcount.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			// Permission checks (once per run) are not counted; paced
			// requests (Lease renewals, step clocks, timed journal
			// batches: a cost per second, none with an instant cluster)
			// are counted apart.
			if !strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews") {
				mu.Lock()
				if paced.Is(r.Context()) {
					timed[r.Method+" "+resourceOf(r.URL.Path)]++
				} else {
					counts[r.Method+" "+resourceOf(r.URL.Path)]++
					total++
				}
				mu.Unlock()
				trace(r)
			}
			return rt.RoundTrip(r)
		})
	}
	defer func() { cli.WrapTransport = nil }()

	var reqs []int
	var took []time.Duration
	for i := range 6 {
		mu.Lock()
		total, counts, timed = 0, map[string]int{}, map[string]int{}
		mu.Unlock()
		start := time.Now()
		atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
		took = append(took, time.Since(start))
		mu.Lock()
		reqs = append(reqs, total)
		t.Logf("node %d: %d requests in %s: %s; paced apart: %s", i+1, total, took[i].Round(time.Millisecond), breakdown(counts),
			breakdown(timed))
		mu.Unlock()
	}
	t.Logf("per-node requests %v; times %v", reqs, took)
	// Nodes hold different numbers of workers and actors (two namespaces,
	// two classes; the last node has no node after it to make room on), so
	// the bound is against the median, not equality: no node may cost more
	// than 1.5× the median node. And none more than maxPerNode, the issue's
	// target: measured 35–38 (about 17 of them the run's own: lock,
	// identity, history, the control API's port-forward and token, the
	// cluster's lists), paced requests apart. Before those were counted
	// apart, step clocks, Lease renewals and timed journal writes made it
	// 39–46 by the machine's load, and 48–50 under a heavy one.
	const maxPerNode = 40
	// The roll's last node also records, once per roll, that every node
	// reached the new version (#42): a fresh node list, the DaemonSet's
	// annotation and its Event. That is the roll's cost, not the node's.
	const lastNodeRecord = 3
	perNode := slices.Clone(reqs)
	perNode[len(perNode)-1] -= lastNodeRecord
	sorted := slices.Sorted(slices.Values(perNode))
	median := (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	if hi := sorted[len(sorted)-1]; hi > median*3/2 || hi > maxPerNode {
		t.Errorf("per-node requests %v (the last node less its record of the roll, %d): the costliest node (%d) is over 1.5× "+
			"the median (%d) or over %d", reqs, lastNodeRecord, hi, median, maxPerNode)
	}
	atetest.NoActorLost(t, ctx)
}
