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
	half     = 20 // nodes per roll: two rounds of K, K more queued for a slot
	parallel = 10
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
// 20 times as long in its builds and module loads, so at every end K nodes
// are queued for a slot; it may cost no more than 5 % more per node (an
// Event, a retry) than the fast one. When every end woke every queued node
// to observe again, the stretched roll cost 8 % more (37.9 → 41.0 per node;
// 40.3 → 47.0 at 40 nodes and 60 s / 20 s in fleetbench); since, 38.1 → 38.4.
// The PDB claims' wait ending at another node's end cost +5 % again (39.0 →
// 40.9); ending at the claiming drain's eviction, 39.8 → 39.5.
func TestRequestsPerNodeDoNotGrowWithWaiting(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	fast, fastBy := roll(t, 0, "2.8.1", time.Second, time.Second)
	slow, slowBy := roll(t, half, "2.9.0", 20*time.Second, 10*time.Second)
	t.Logf("requests per node: %.1f with 1 s builds and loads, %.1f with 20 s builds and 10 s loads", fast, slow)
	t.Logf("fast: %s\nstretched: %s", fastBy, slowBy)
	if slow > 1.05*fast {
		t.Errorf("a roll whose helpers wait longer costs more per node: %.1f requests with 1 s helpers, %.1f with 20 s / 10 s",
			fast, slow)
	}
}
