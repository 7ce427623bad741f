//go:build e2e

// Package fleetbench measures `kubectl tt upgrade kmd --max-parallel K` over
// a simulated fleet in kernel groups against its ideal: one build per
// kernel group (the groups build at once) plus ceil(N/K) × (drain + hit),
// and says where the slots' time beyond it went (internal/critpath).
// Sizes come from the environment (`make bench-fleet-kmd` sets them):
// ROLLBOOK_FLEET_NODES (default 24), ROLLBOOK_FLEET_PARALLEL (20),
// ROLLBOOK_FLEET_KERNELS (4), ROLLBOOK_FLEET_BUILD (30s), ROLLBOOK_FLEET_HIT
// (5s), ROLLBOOK_FLEET_PDB_DISRUPTIONS (the parallel limit). The issue's
// size is 1,000 nodes. ROLLBOOK_FLEET_PROGRESS=FILE keeps
// the run's progress output (and FILE.requests every request, timed).
package fleetbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/apicount"
	"github.com/rollbook/rollbook/internal/critpath"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return def
}

func envDur(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil && d > 0 {
		return d
	}
	return def
}

var (
	nodes    = envInt("ROLLBOOK_FLEET_NODES", 24)
	parallel = envInt("ROLLBOOK_FLEET_PARALLEL", 20)
	groups   = envInt("ROLLBOOK_FLEET_KERNELS", 4)
	build    = envDur("ROLLBOOK_FLEET_BUILD", 30*time.Second)
	hit      = envDur("ROLLBOOK_FLEET_HIT", 5*time.Second)
)

func TestMain(m *testing.M) {
	// A benchmark with time targets: it runs from make bench-fleet-kmd, not
	// in make test (a loaded machine would fail its figures, not its logic).
	if os.Getenv("ROLLBOOK_FLEET_BENCH") != "1" {
		fmt.Println("fleetbench: skipped, a benchmark: run make bench-fleet-kmd (ROLLBOOK_FLEET_BENCH=1)")
		os.Exit(0)
	}
	var ks []string
	for i := range groups {
		ks = append(ks, fmt.Sprintf("6.1.0-%d-amd64", 28+i))
	}
	_ = os.Setenv("ROLLBOOK_SIM_TT_KERNELS", strings.Join(ks, ","))
	// The build path is make then insmod; the hit path insmod alone.
	_ = os.Setenv("ROLLBOOK_SIM_TT_BUILD_DELAY", build.String())
	_ = os.Setenv("ROLLBOOK_SIM_TT_LOAD_DELAY", hit.String())
	// A fleet sized for K nodes drained at once: its PDB lets K replicas go
	// (at the scenario's default of 1, K drains queue on one PDB), or
	// ROLLBOOK_FLEET_PDB_DISRUPTIONS (many: the slots alone bind).
	_ = os.Setenv("ROLLBOOK_SIM_TT_PDB_DISRUPTIONS", strconv.Itoa(envInt("ROLLBOOK_FLEET_PDB_DISRUPTIONS", parallel)))
	// The tt-fleet scenario's last three nodes are awkward and not rolled.
	// Node Leases renewed every 20 min, not 10 s: at 1,000 nodes the
	// kubelet-style renewals alone are 100 writes a second, which a real
	// control plane serves on its own cores but the sim serves on the two
	// this bench measures the roll on (hack/bench-status.sh does the same).
	// The sim's Go heap (apiserver, etcd, controllers, scheduler and kwok in
	// one process) is collected at GOGC=400, not 100: at 1,000 nodes its
	// garbage collector was 12 % of the sim's CPU, on the cores the roll is
	// measured on. Only the sim gets it; the tool runs in this process.
	simtest.Main(m, simtest.Options{Nodes: nodes + 3, Scenario: "tt-fleet", ExtraArgs: []string{"--node-lease-seconds", "1200"},
		Env: []string{"GOGC=400"}})
}

// progress marks each node's end and the durations of its drain steps.
type progress struct {
	mu     sync.Mutex
	rc     *apicount.Counter
	buf    bytes.Buffer
	line   []byte
	ends   []int                    // requests so far at each node's end
	drains map[string]time.Duration // per node: cordon to drained
	start  time.Time                // lines are kept with their time since it
	half   chan struct{}            // closed when half the nodes are done
}

// drainSteps are a node's steps from its cordon until nothing but the
// helper is left on it: what `kubectl drain` does (cordon, then evict),
// with tt-kmd's gates closed and device holders moved first.
var drainSteps = []string{"Cordon the node", "Close the deploy gates", "Move device-holding pods away", "Drain the rest of the node"}

var doneLine = regexp.MustCompile(`✓\s+(\S+)\s+(.+?)\s{2,}`)

var took = regexp.MustCompile(`\((\d+(?:\.\d+)?(?:ms|s|m))\)\s*$`)

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range b {
		if c != '\n' {
			p.line = append(p.line, c)
			continue
		}
		l := string(p.line)
		p.line = p.line[:0]
		fmt.Fprintf(&p.buf, "%7.2f %s\n", time.Since(p.start).Seconds(), l)
		if !strings.Contains(l, "✓") {
			continue
		}
		if strings.Contains(l, "Remove the helper pod") {
			p.ends = append(p.ends, p.rc.Total())
			if len(p.ends) == max(1, nodes/2) {
				close(p.half)
			}
		}
		m := doneLine.FindStringSubmatch(l)
		if m == nil || !slices.Contains(drainSteps, m[2]) {
			continue
		}
		if p.drains == nil {
			p.drains = map[string]time.Duration{}
		}
		d := time.Duration(0)
		if t := took.FindStringSubmatch(l); t != nil {
			d, _ = time.ParseDuration(t[1])
		}
		p.drains[m[1]] += d
	}
	return len(b), nil
}

func TestKMDFleetInParallel(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	batches := int(math.Ceil(float64(nodes) / float64(parallel)))
	ctx := simtest.Context(t, time.Duration(batches)*(build+hit+time.Minute)+5*time.Minute)
	var names []string
	for i := range nodes {
		names = append(names, fmt.Sprintf("kwok-node-%d", i))
	}
	rc, stop := apicount.Start()
	defer stop()
	streams, _, _, _ := genericiooptions.NewTestIOStreams()
	p := &progress{rc: rc, half: make(chan struct{})}
	streams.Out, streams.ErrOut = p, p
	// `tt status` against the floor, from another process, once half the
	// fleet is done.
	floorBin := buildFloor(t, t.TempDir())
	ttBin, err := simtest.AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	rolled := make(chan struct{})
	status := make(chan midRoll, 1)
	go func() {
		select {
		case <-p.half:
			p.mu.Lock()
			finished := len(p.ends)
			p.mu.Unlock()
			status <- measureStatus(c.Kubeconfig, floorBin, ttBin, finished)
		case <-rolled:
			status <- midRoll{err: fmt.Errorf("the roll ended before half its nodes were done")}
		}
	}()
	simCPU0, err := c.CPU()
	if err != nil {
		t.Fatal(err)
	}
	toolCPU0 := selfCPU()
	busy0, busyErr := machineTicks()
	start := time.Now()
	p.start = start
	code := cli.ExecuteContext(ctx, ttcmd.NewRootCommand(streams), []string{"upgrade", "kmd", "--version", "2.8.1",
		"--nodes", strings.Join(names, ","), "--max-parallel", strconv.Itoa(parallel), "--kubeconfig", c.Kubeconfig}, p)
	total := time.Since(start)
	toolCPU := selfCPU() - toolCPU0
	busy1, busyErr1 := machineTicks()
	close(rolled)
	mid := <-status
	simCPU1, err := c.CPU()
	if err != nil {
		t.Fatal(err)
	}
	simCPU := simCPU1.Since(simCPU0)
	if name := os.Getenv("ROLLBOOK_FLEET_PROGRESS"); name != "" {
		// The run's progress, for where its time went (each step's line
		// ends with its duration).
		_ = os.WriteFile(name, p.buf.Bytes(), 0o644)
		_ = os.WriteFile(name+".requests", []byte(rc.Paths()), 0o644)
	}
	if code != 0 {
		t.Fatalf("kubectl tt upgrade kmd → exit %d\n%s", code, p.buf.String())
	}
	if len(p.ends) != nodes {
		t.Fatalf("saw %d nodes finish, want %d", len(p.ends), nodes)
	}

	builds := 0
	for _, name := range names {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			BuiltBy string `json:"builtBy"`
		}
		if json.Unmarshal([]byte(n.Annotations[tt.AnnKMDResult]), &rec) != nil || rec.BuiltBy == "" {
			t.Fatalf("node %s has no kmd result", name)
		}
		if rec.BuiltBy == name {
			builds++
		}
	}
	reqs := make([]int, nodes)
	prev := 0
	for i, e := range p.ends {
		reqs[i], prev = e-prev, e
	}
	drain := median(slices.Collect(maps.Values(p.drains)))
	ideal := build + time.Duration(batches)*(drain+hit)
	over := total.Seconds()/ideal.Seconds() - 1
	// Flat: with K nodes in flight, finishes interleave, so compare the
	// requests made while the first quarter of the nodes finished (the
	// first node, which carries the run's start, left out) with those made
	// while the last quarter did, per node.
	q := max(3, nodes/4)
	first := (p.ends[q] - p.ends[0]) / q
	last := (p.ends[nodes-1] - p.ends[nodes-1-q]) / q
	perNode := float64(rc.Total()) / float64(nodes)

	t.Logf("%d nodes, %d kernel groups, --max-parallel %d, build %s, hit %s, median drain %s (cordon to drained, per node)",
		nodes, groups, parallel, build, hit, drain.Round(time.Millisecond))
	// The machine's cores busy during the roll, whoever used them (the
	// sim, the tool, other work on the machine): above 80 % the roll waited
	// on the cores, and its time measures the machine, not rollbook.
	busy := -1.0
	if busyErr == nil && busyErr1 == nil {
		busy = busy1.since(busy0)
	}
	limited := busy > machineLimit
	switch {
	case limited:
		t.Logf("roll in %s; ideal %s: no ratio reported: the machine's cores were %.0f %% busy during the roll (limit %.0f %%): "+
			"the machine was the limit, not rollbook", total.Round(time.Second), ideal.Round(time.Second), 100*busy, 100*machineLimit)
	default:
		t.Logf("roll in %s; ideal %s (one build round + %d × (drain + hit)): %+.1f %% (target ≤ +15 %%); the machine's cores "+
			"%.0f %% busy during the roll (ratio reported below %.0f %%)", total.Round(time.Second), ideal.Round(time.Second), batches,
			100*over, 100*busy, 100*machineLimit)
	}
	// What the machine's cores had to give: when the CPU alone needs about
	// the roll's time, the roll waited on the cores, not on its own waits.
	cpu := toolCPU + simCPU.Total()
	t.Logf("CPU: %s in all (%.2f s per node): the tool %s, the sim's processes %s (%s); on %d cores that alone is %s of the roll's %s",
		cpu.Round(time.Second), cpu.Seconds()/float64(nodes), toolCPU.Round(time.Second), simCPU.Total().Round(time.Second),
		topCPU(simCPU, 5), runtime.NumCPU(), (cpu / time.Duration(runtime.NumCPU())).Round(time.Second), total.Round(time.Second))
	// The same work done at the ideal's pace: more cores than the machine
	// has means the target measures the machine (the sim's control plane,
	// kubelets and helpers share the cores the roll is timed on).
	t.Logf("at the ideal's pace that CPU needs %.1f cores (this machine has %d)", cpu.Seconds()/ideal.Seconds(), runtime.NumCPU())
	if rss, err := c.PeakRSS(); err == nil {
		t.Logf("the sim's peak memory: %d MiB (GOGC=400)", rss>>20)
	}
	t.Logf("builds: %d (target exactly %d)", builds, groups)
	t.Logf("requests: %d in all (+%d permission checks), %.1f per node (target ≤ 40); per node while the first quarter finished %d, "+
		"while the last quarter did %d (flat within ±20 %%); %s", rc.Total(), rc.Preflight(), perNode, first, last, rc.Breakdown())
	t.Logf("status mid-roll: %s", mid)
	if own, err := criticalPath(p.buf.Bytes()); err != nil {
		t.Errorf("where rollbook's own time went: %v", err)
	} else {
		t.Logf("rollbook's own time in the slots (beyond each node's drain and hit): %s per node, %s of the roll at %d slots; "+
			"the top three: %s", (own.Total() / time.Duration(max(1, own.Nodes))).Round(time.Millisecond),
			(own.Total() / time.Duration(parallel)).Round(time.Second), parallel, own.Top(3))
	}
	if builds != groups {
		t.Errorf("%d builds, want exactly %d (one per kernel group)", builds, groups)
	}
	if perNode > 40 {
		t.Errorf("%.1f requests per node, want ≤ 40", perNode)
	}
	if float64(last) > 1.2*float64(first) || float64(last) < 0.8*float64(first) {
		t.Errorf("per-node cost is not flat: first quarter's median %d, last quarter's %d: %v", first, last, reqs)
	}
	if mid.err != nil || mid.ratio() > 1.3 {
		t.Errorf("status mid-roll: %s", mid)
	}
	if over > 0.15 && !limited {
		t.Errorf("the roll took %s, %.1f %% over its ideal %s (target ≤ 15 %%)", total.Round(time.Second), 100*over, ideal.Round(time.Second))
	}
}

// The steps that take and give back a --max-parallel slot, and the one
// whose time beyond the hit is rollbook's: the helper's start and finish.
const (
	takeStep   = "Cordon the node"
	helperStep = "Swap the kernel module"
	giveStep   = "Uncordon the node"
)

// criticalPath says where the slots' time beyond the ideal went, from the
// run's progress lines (issue 45, item 2).
func criticalPath(progress []byte) (critpath.Breakdown, error) {
	rb := tt.KMDRunbook(nil, nil, &tt.KMDConfig{Version: "2.8.1", DeployGates: []string{tt.DefaultDeployGate}, Drain: true,
		FullNode: true, Helper: tt.HelperConfig{Image: "IMAGE"}})
	var titles []string
	for _, s := range rb.Steps {
		titles = append(titles, s.Title)
	}
	for _, want := range append([]string{takeStep, helperStep, giveStep}, drainSteps...) {
		if !slices.Contains(titles, want) {
			return critpath.Breakdown{}, fmt.Errorf("the kmd runbook has no step %q (its steps: %s)", want, strings.Join(titles, ", "))
		}
	}
	marks, err := critpath.Parse(bytes.NewReader(progress), titles)
	if err != nil {
		return critpath.Breakdown{}, err
	}
	s := critpath.Slots{Parallel: parallel, Take: takeStep, Release: giveStep,
		Ideal: func(step string, took time.Duration) time.Duration {
			switch {
			case slices.Contains(drainSteps, step):
				return took
			case step == helperStep:
				return hit
			}
			return 0
		}}
	b := s.Analyse(marks)
	if b.Nodes != nodes {
		return b, fmt.Errorf("saw %d of %d nodes from their cordon to their uncordon in the progress output", b.Nodes, nodes)
	}
	return b, nil
}

// machineLimit is the share of the machine's cores busy above which the
// roll's time measures the machine (issue 45).
const machineLimit = 0.8

// ticks are the machine's CPU times from /proc/stat: busy and all.
type ticks struct{ busy, all uint64 }

func machineTicks() (ticks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return ticks{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return ticks{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var tk ticks
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return ticks{}, err
		}
		tk.all += n
		if i != 3 && i != 4 { // idle, iowait
			tk.busy += n
		}
	}
	return tk, nil
}

// since is the share of the cores busy between t0 and t.
func (t ticks) since(t0 ticks) float64 {
	if t.all <= t0.all {
		return 0
	}
	return float64(t.busy-t0.busy) / float64(t.all-t0.all)
}

// selfCPU is the CPU time this process (the tool runs in it) used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// topCPU names the n processes that used the most.
func topCPU(u simtest.CPUUse, n int) string {
	names := slices.Collect(maps.Keys(u))
	slices.SortFunc(names, func(a, b string) int { return int(u[b] - u[a]) })
	var parts []string
	for _, k := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %s", k, u[k].Round(100*time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

func median(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
