//go:build e2e

// Package atechaos kills `kubectl ate roll next-node --all --wait` with
// SIGKILL at random points on a four-node ate-fleet with traffic on,
// re-runs the same command until it finishes, and checks from the
// substrate's own record that every node's version label flipped exactly
// once and that no actor was lost. First it kills clone-pools after each
// line it prints. It also starts a roll and a rollback together, and
// scans every output and cluster object for secrets.
package atechaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/chaostest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
)

func TestMain(m *testing.M) {
	// A deleted worker's actors crash within the test, so a roll that
	// deleted one too early is caught.
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "ate-fleet"})
}

var (
	nodes   = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3"}
	printed chaostest.Transcript
	kills   int
	stops   []string

	binOnce sync.Once
	bin     string
	binErr  error
)

func plugin(t *testing.T) *chaostest.Plugin {
	t.Helper()
	binOnce.Do(func() { bin, binErr = chaostest.BuildPlugin("kubectl-ate") })
	if binErr != nil {
		t.Fatal(binErr)
	}
	return &chaostest.Plugin{Bin: bin, Kubeconfig: simtest.Get(t).Kubeconfig, Log: &printed}
}

// flips reads the substrate's record of version-label changes (sim/substrate
// appends one JSON line per change to DIR/ate-flips.log).
func flips(t *testing.T) []map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(simtest.Get(t).Dir, "ate-flips.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func mustRun(t *testing.T, ctx context.Context, p *chaostest.Plugin, args ...string) {
	t.Helper()
	if r := p.Run(ctx, chaostest.KillPoint{}, args...); r.Code != 0 {
		t.Fatalf("kubectl ate %s: exit %d\n%s", strings.Join(args, " "), r.Code, r.Out)
	}
}

// expectOneFlipEach fails t unless every node flipped exactly once, from
// from to to, in the records after skip.
func expectOneFlipEach(t *testing.T, skip int, from, to string) {
	t.Helper()
	got := map[string][]string{}
	for _, f := range flips(t)[skip:] {
		got[f["node"]] = append(got[f["node"]], f["from"]+"→"+f["to"])
	}
	for _, n := range nodes {
		if len(got[n]) != 1 || got[n][0] != from+"→"+to {
			t.Errorf("%s flipped %v; want exactly once %s→%s", n, got[n], from, to)
		}
	}
}

// TestClonePoolsKilledAtEachLine kills `roll clone-pools` right after each
// line it prints in turn — after each clone's create, after the step's
// end, after the Deployments' check — from no clone each time; the same
// command run again finishes, and preflight reads the clones back as
// planned (each equal to its source but for image and pin).
func TestClonePoolsKilledAtEachLine(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	p := plugin(t)
	atetest.DeployAtelet(t, atetest.NewV)
	pools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR)
	clones := func(ctx context.Context) (map[string]string, error) {
		l, err := pools.Namespace("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, u := range l.Items {
			if _, ok := u.GetAnnotations()[fleet.AnnClonedFrom]; ok {
				out[u.GetNamespace()+"/"+u.GetName()] = u.GetName()
			}
		}
		return out, nil
	}
	killed := 0
	for n := 1; ; n++ {
		r := p.Run(ctx, chaostest.KillPoint{AfterLines: n}, atetest.CloneArgs...)
		if !r.Killed {
			if r.Code != 0 {
				t.Fatalf("clone-pools, not killed: exit %d\n%s", r.Code, r.Out)
			}
			break
		}
		killed++
		t.Logf("killed after line %d: %s", n, r.LastLine)
		mustRun(t, ctx, p, atetest.CloneArgs...)
		mustRun(t, ctx, p, "preflight")
		// From no clone again (no node is at NEW: the clones serve nothing).
		made, err := clones(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for key, name := range made {
			if err := pools.Namespace(path.Dir(key)).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var still string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			left, err := clones(ctx)
			if err != nil || len(left) > 0 {
				still = fmt.Sprintf("clones %v (%v)", left, err)
				return false, nil
			}
			pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				if _, clone := made[p.Namespace+"/"+p.Labels[fleet.PoolLabel]]; clone {
					still = fmt.Sprintf("pod %s/%s (%s)", p.Namespace, p.Name, p.Status.Phase)
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			t.Fatalf("the clones and their pods did not go: %v; left: %s", err, still)
		}
	}
	if killed < 4 {
		t.Fatalf("clone-pools was killed at %d point(s) only: the test proved little", killed)
	}
	t.Logf("FIGURES clone-pools: killed after each of its first %d lines; every re-run finished and preflight passed", killed)
}

// TestRollKilledAnywhere: the whole roll, killed at random points and re-run
// with the same command until it finishes; then the rollback gets the same
// treatment, and so on while kills are left.
func TestRollKilledAnywhere(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	seed := chaostest.Seed(t) + 2
	budget := chaostest.Kills(t, 18)
	ctx := simtest.Context(t, 8*time.Minute+time.Duration(budget)*30*time.Second)
	k := chaostest.NewKiller(seed, 20, 5*time.Second)
	p := plugin(t)
	start := time.Now()
	// Every round pair rolls forward and back, so the fleet ends where it began.
	for round := 0; round < 2 || kills < budget || round%2 == 1; round++ {
		skip := len(flips(t))
		if round%2 == 0 {
			atetest.DeployAtelet(t, atetest.NewV) // the rollback removed it
			mustRun(t, ctx, p, atetest.CloneArgs...)
			mustRun(t, ctx, p, "preflight")
			f := chaostest.Converge(t, ctx, p, k, budget-kills, "roll", "next-node", "--all", "--wait")
			kills, stops = kills+f.Kills, append(stops, f.Stops...)
			expectOneFlipEach(t, skip, atetest.OldV, atetest.NewV)
			s := atetest.Status(t, ctx)
			if s.Counts[atetest.NewV] != len(nodes) || s.OldPoolPodsRunning != 0 || s.ActorsOnOldPools != 0 {
				t.Errorf("round %d, after the roll: %s %v, %d old pods Running, %d actors on old workers", round, s.Phase, s.Counts,
					s.OldPoolPodsRunning, s.ActorsOnOldPools)
			}
		} else {
			f := chaostest.Converge(t, ctx, p, k, budget-kills, "rollback", "--control-plane-reverted", "--wait")
			kills, stops = kills+f.Kills, append(stops, f.Stops...)
			expectOneFlipEach(t, skip, atetest.NewV, atetest.OldV)
		}
		atetest.NoActorLost(t, ctx)
		chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("FIGURES ate: %d kills survived, %d unkilled stops re-run %v, seed %d, %s", kills, len(stops), stops, seed,
		time.Since(start).Round(time.Second))
}

// TestRollAndRollbackTogether: a roll and a rollback started at once: one
// acts, the other exits 4 naming the holder's pid, and no node flips both
// ways.
func TestRollAndRollbackTogether(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	p := plugin(t)
	// Both have work: the new atelet and pools are there and one node is
	// rolled, so the roll has three nodes to move and the rollback one.
	atetest.DeployAtelet(t, atetest.NewV)
	mustRun(t, ctx, p, atetest.CloneArgs...)
	mustRun(t, ctx, p, "preflight")
	mustRun(t, ctx, p, "roll", "next-node", "--wait")
	skip := len(flips(t))
	starts := make(chan int, 2)
	type res struct {
		name string
		r    chaostest.Result
	}
	results := make(chan res, 2)
	go func() { results <- res{"roll", p.RunNotify(ctx, starts, "roll", "next-node", "--all", "--wait")} }()
	go func() {
		results <- res{"rollback", p.RunNotify(ctx, starts, "rollback", "--control-plane-reverted", "--wait")}
	}()
	pids := []int{<-starts, <-starts}
	a, b := <-results, <-results
	if a.r.Code == cli.ExitLocked {
		a, b = b, a
	}
	if a.r.Code != 0 || b.r.Code != cli.ExitLocked {
		t.Fatalf("want one run to finish (0) and the other locked out (4); %s %d, %s %d:\n%s\n---\n%s", a.name, a.r.Code, b.name, b.r.Code,
			a.r.Out, b.r.Out)
	}
	if !strings.Contains(b.r.Out, fmt.Sprintf("pid %d", pids[0])) && !strings.Contains(b.r.Out, fmt.Sprintf("pid %d", pids[1])) {
		t.Fatalf("the locked-out %s must name the holder (its pid):\n%s", b.name, b.r.Out)
	}
	dirs := map[string]bool{}
	per := map[string]int{}
	for _, f := range flips(t)[skip:] {
		dirs[f["from"]+"→"+f["to"]] = true
		per[f["node"]]++
	}
	if len(dirs) > 1 {
		t.Errorf("nodes flipped both ways while a roll and a rollback ran: %v", dirs)
	}
	for n, k := range per {
		if k > 1 {
			t.Errorf("%s flipped %d times", n, k)
		}
	}
	atetest.NoActorLost(t, ctx)
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	t.Logf("FIGURES concurrency: %s exit 0 (%d node flips), %s exit 4", a.name, len(flips(t))-skip, b.name)
}

// TestZSecretsNeverPrintedOrWritten runs last: nothing the runs printed,
// and no Event, Lease or ConfigMap, holds a bearer token (the control-API
// token the plugin mints is a JWT), credentials in a URL or the
// kubeconfig's key.
func TestZSecretsNeverPrintedOrWritten(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	s := chaostest.ExpectNoSecrets(t, ctx, c.Kubeconfig, c.Client, printed.All())
	t.Logf("FIGURES ate: %d kills survived; secrets scan: %s", kills, s)
}
