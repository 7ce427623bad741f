//go:build e2e

// Package waitcost holds a kmd roll's API requests per node flat between a
// cluster that answers fast and one whose helpers take long (issue 45, item
// 5): a wait must cost a watch, not a request per second of waiting. Two
// halves of one fleet roll the same shape (two kernel groups, --max-parallel
// K, one build per group) to two versions: the first with a build and a
// module load of a second each, the second with both stretched.
package waitcost

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/apicount"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
)

const (
	// Nodes per roll, K at once: 15 queued for a slot at the start, so a
	// wait that cost a request per slot freed (or per second) would show
	// several requests per node, far above the noise (below).
	half     = 20
	parallel = 5
)

var kernels = []string{"6.1.0-28-amd64", "6.1.0-31-amd64"}

func TestMain(m *testing.M) {
	_ = os.Setenv("ROLLBOOK_SIM_TT_KERNELS", strings.Join(kernels, ","))
	_ = os.Setenv("ROLLBOOK_SIM_TT_BUILD_DELAY", "1s")
	_ = os.Setenv("ROLLBOOK_SIM_TT_LOAD_DELAY", "1s")
	// K drains at once: the PDB lets K replicas go (see fleetbench).
	_ = os.Setenv("ROLLBOOK_SIM_TT_PDB_DISRUPTIONS", strconv.Itoa(parallel))
	// The scenario's last three nodes are awkward and not rolled. Node
	// Leases renewed rarely, as in fleetbench: the sim's own load stays low.
	simtest.Main(m, simtest.Options{Nodes: 2*half + 3, Scenario: "tt-fleet", ExtraArgs: []string{"--node-lease-seconds", "1200"}})
}

// roll upgrades nodes [from, from+half) to version with the hosts' build
// and load taking build and load, and returns the requests per node (paced
// ones apart: they are a cost per second of the run, budgeted apart).
func roll(t *testing.T, from int, version string, build, load time.Duration) (float64, string) {
	t.Helper()
	c := simtest.Get(t)
	var names []string
	for i := from; i < from+half; i++ {
		name := fmt.Sprintf("kwok-node-%d", i)
		names = append(names, name)
		if err := fakehost.SetDelays(filepath.Join(c.Dir, "hosts", name), build, load); err != nil {
			t.Fatal(err)
		}
	}
	ctx := simtest.Context(t, 5*time.Minute)
	rc, stop := apicount.Start()
	defer stop()
	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", strings.Join(names, ","),
		"--max-parallel", strconv.Itoa(parallel))
	if code != 0 {
		t.Fatalf("upgrade kmd %s → exit %d\n%s", version, code, out)
	}
	return float64(rc.Total()) / half, rc.Breakdown()
}

// TestRequestsPerNodeDoNotGrowWithWaiting: the stretched roll waits 10 to
// 20 times as long in its builds and module loads, so at every end nodes
// are queued for a slot; it may cost no more than 10 % more per node than
// the fast one. At K=10 the fast roll's own cost varied: 11 runs gave
// 38.0 to 41.0 requests per node (the stretched 39.5 to 40.6), so a 5 %
// bound failed one run in four with nothing wrong. Waking every queued
// node at every end cost 8 % more at K=10 (37.9 → 41.0; 40.3 → 47.0 at 40
// nodes in fleetbench): one observation per end per queued node, about
// (N-K)(N-K+1)/2N per node, 2.75 at K=10 and 6 at K=5. So K=5, where that
// bug is some 15 %, and the 10 % bound; at K=5 three runs gave 41.7 to
// 42.0 fast and 41.5 to 42.1 stretched. The PDB claims' wait ending at
// another node's end cost +5 % (39.0 → 40.9); ending at the claiming
// drain's eviction, 39.8 → 39.5.
func TestRequestsPerNodeDoNotGrowWithWaiting(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	fast, fastBy := roll(t, 0, "2.8.1", time.Second, time.Second)
	slow, slowBy := roll(t, half, "2.9.0", 20*time.Second, 10*time.Second)
	t.Logf("requests per node: %.1f with 1 s builds and loads, %.1f with 20 s builds and 10 s loads", fast, slow)
	t.Logf("fast: %s\nstretched: %s", fastBy, slowBy)
	if slow > 1.10*fast {
		t.Errorf("a roll whose helpers wait longer costs more per node: %.1f requests with 1 s helpers, %.1f with 20 s / 10 s",
			fast, slow)
	}
}
