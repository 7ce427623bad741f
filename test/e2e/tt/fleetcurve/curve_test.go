//go:build e2e

// Package fleetcurve measures what each node of one `kubectl tt upgrade kmd`
// costs as the roll goes through a fleet: the 100th node must cost what the
// 1st does (nothing per node may list the fleet). ROLLBOOK_FLEET_NODES sets
// the nodes rolled (default 12; `make bench-fleet` runs 100).
package fleetcurve

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/apicount"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

func rolled() int {
	if n, err := strconv.Atoi(os.Getenv("ROLLBOOK_FLEET_NODES")); err == nil && n >= 4 {
		return n
	}
	return 12
}

// The tt-fleet scenario makes its last three nodes awkward (DKMS, skipped,
// a stubborn holder); they are not rolled.
func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: rolled() + 3, Scenario: "tt-fleet"})
}

// nodeDone is the progress line of a node's last step done.
const lastStep = "Remove the helper pod"

// progress snapshots the request counter whenever a node finishes.
type progress struct {
	mu    sync.Mutex
	rc    *apicount.Counter
	buf   bytes.Buffer
	line  []byte
	marks []mark
}

type mark struct {
	node     string
	requests int
	at       time.Time
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf.Write(b)
	for _, c := range b {
		if c != '\n' {
			p.line = append(p.line, c)
			continue
		}
		if l := string(p.line); strings.Contains(l, "✓") && strings.Contains(l, lastStep) {
			if f := strings.Fields(l); len(f) > 1 {
				p.marks = append(p.marks, mark{node: f[1], requests: p.rc.Total(), at: time.Now()})
			}
		}
		p.line = p.line[:0]
	}
	return len(b), nil
}

func TestKMDCostIsFlatAcrossTheFleet(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	n := rolled()
	ctx := simtest.Context(t, time.Duration(n)*20*time.Second+2*time.Minute)
	var nodes []string
	for i := range n {
		nodes = append(nodes, fmt.Sprintf("kwok-node-%d", i))
	}
	rc, stop := apicount.Start()
	defer stop()
	streams, _, _, _ := genericiooptions.NewTestIOStreams()
	p := &progress{rc: rc}
	streams.Out, streams.ErrOut = p, p
	start := time.Now()
	code := cli.ExecuteContext(ctx, ttcmd.NewRootCommand(streams),
		[]string{"upgrade", "kmd", "--version", "2.8.1", "--nodes", strings.Join(nodes, ","), "--kubeconfig", c.Kubeconfig}, p)
	total := time.Since(start)
	if code != 0 {
		t.Fatalf("kubectl tt upgrade kmd → exit %d\n%s", code, p.buf.String())
	}
	if len(p.marks) != n {
		t.Fatalf("saw %d nodes finish, want %d\n%s", len(p.marks), n, p.buf.String())
	}
	reqs, times := make([]int, n), make([]time.Duration, n)
	prevReq, prevAt := 0, start
	for i, m := range p.marks {
		reqs[i], times[i] = m.requests-prevReq, m.at.Sub(prevAt)
		prevReq, prevAt = m.requests, m.at
	}
	t.Logf("%d nodes in %s, %d requests (+%d permission checks); %s", n, total.Round(time.Millisecond), rc.Total(), rc.Preflight(), rc.Breakdown())
	t.Logf("per-node requests, in the order the nodes finished (the first carries the run's start): %v", reqs)
	t.Logf("per-node seconds: %v", roundAll(times))
	// Flat: the last quarter's median (at least 3 nodes) within ±20 % of the first quarter's
	// (the first node, which carries the run's own start, left out).
	q := max(3, n/4)
	first, last := median(reqs[1:1+q]), median(reqs[n-q:])
	t.Logf("median requests per node: first quarter %d, last quarter %d (target ≤ 40, flat within ±20 %%)", first, last)
	if float64(last) > 1.2*float64(first) || float64(last) < 0.8*float64(first) {
		t.Errorf("per-node cost is not flat: first quarter's median %d, last quarter's %d: %v", first, last, reqs)
	}
}

func median(v []int) int {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func roundAll(d []time.Duration) []string {
	out := make([]string, len(d))
	for i := range d {
		out[i] = fmt.Sprintf("%.2f", d[i].Seconds())
	}
	return out
}
