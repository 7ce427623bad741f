//go:build e2e

// Package ttchaos kills `kubectl tt upgrade kmd` and `upgrade firmware`
// with SIGKILL at random points on a four-node tt-fleet, re-runs the same
// command until it finishes, and checks from the simulated hosts' own
// records that every node's module was swapped and every chip flashed
// exactly once. It also starts competing runs together, and scans every
// output and cluster object for secrets.
package ttchaos

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rollbook/rollbook/internal/chaostest"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet"})
}

var (
	nodes   = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3"}
	printed chaostest.Transcript
	totals  struct {
		sync.Mutex
		kills, runs, stops int
	}
)

func plugin(t *testing.T) *chaostest.Plugin {
	t.Helper()
	bin, err := simtest.AgentBinary() // the kubectl-tt of this tree
	if err != nil {
		t.Fatal(err)
	}
	return &chaostest.Plugin{Bin: bin, Kubeconfig: simtest.Get(t).Kubeconfig, Log: &printed}
}

func count(f chaostest.Figures) {
	totals.Lock()
	defer totals.Unlock()
	totals.kills += f.Kills
	totals.runs += f.Runs
	totals.stops += len(f.Stops)
}

// opsSince returns, per node, the host operations recorded after the
// counts in before.
func opsSince(t *testing.T, before map[string]int) map[string][]fakehost.Op {
	t.Helper()
	out := map[string][]fakehost.Op{}
	for _, n := range nodes {
		ops, err := chaostest.HostOps(simtest.Get(t).Dir, n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = ops[before[n]:]
	}
	return out
}

func opCounts(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range nodes {
		ops, err := chaostest.HostOps(simtest.Get(t).Dir, n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = len(ops)
	}
	return out
}

// TestKMDKilledAnywhere: a four-node kmd roll, killed at random points and
// re-run until it finishes, round after round (each to another version)
// until the kill budget is spent. Each round loads the new module exactly
// once per node, by the hosts' own records.
func TestKMDKilledAnywhere(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	seed := chaostest.Seed(t)
	budget := chaostest.Kills(t, 24)
	ctx := simtest.Context(t, 5*time.Minute+time.Duration(budget)*15*time.Second)
	k := chaostest.NewKiller(seed, 14, 6*time.Second)
	p := plugin(t)
	start := time.Now()
	kills := 0
	for round, v := 0, ""; round == 0 || kills < budget; round++ {
		v = []string{"2.8.0", "2.9.1", "2.8.1", "2.7.0"}[round%4]
		before := opCounts(t)
		f := chaostest.Converge(t, ctx, p, k, budget-kills, "upgrade", "kmd", "--version", v)
		kills += f.Kills
		count(f)
		for n, ops := range opsSince(t, before) {
			loads := 0
			for _, o := range ops {
				if o.Op == fakehost.OpInsmod && o.Version == v {
					loads++
				}
			}
			if loads != 1 {
				t.Errorf("round %d (kmd %s): %s loaded the module %d times; want exactly once (ops %+v)", round, v, n, loads, ops)
			}
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if node.Labels[tt.LabelKMDVersion] != v {
				t.Errorf("round %d: %s has kmd label %q, want %s", round, n, node.Labels[tt.LabelKMDVersion], v)
			}
		}
		chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
		chaostest.NoHelperPodLeft(t, ctx, c.Client)
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("FIGURES kmd: %d kills survived, seed %d, %s", kills, seed, time.Since(start).Round(time.Second))
}

// TestFirmwareKilledAnywhere: the same for a firmware roll with
// --max-parallel 2: every chip is written exactly once per round.
func TestFirmwareKilledAnywhere(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	seed := chaostest.Seed(t) + 1
	budget := chaostest.Kills(t, 16)
	ctx := simtest.Context(t, 5*time.Minute+time.Duration(budget)*15*time.Second)
	// Chips only move up without --force-write, so there are two rounds
	// (19.0.0, then 19.9.0); a bigger budget kills more densely.
	k := chaostest.NewKiller(seed, 10, max(700*time.Millisecond, 3*time.Second*16/time.Duration(max(budget, 1))))
	p := plugin(t)
	start := time.Now()
	kills := 0
	for round := 0; round < 2 && (round == 0 || kills < budget); round++ {
		v := []string{"19.0.0", "19.9.0"}[round]
		args := []string{"upgrade", "firmware", "--version", v, "--bundle-url", bundle(c, v), "--max-parallel", "2"}
		before := opCounts(t)
		f := chaostest.Converge(t, ctx, p, k, budget-kills, args...)
		kills += f.Kills
		count(f)
		for n, ops := range opsSince(t, before) {
			chips := map[int]int{}
			for _, o := range ops {
				if o.Op == fakehost.OpFlash && o.Version == v+".0" {
					chips[o.Chip]++
				}
			}
			obs, err := fakehost.Inspect(filepath.Join(c.Dir, "hosts", n))
			if err != nil {
				t.Fatal(err)
			}
			for i := range obs.Firmware {
				if chips[i] != 1 {
					t.Errorf("round %d (firmware %s): %s chip %d was written %d times; want exactly once (ops %+v)", round, v, n, i,
						chips[i], ops)
				}
				if obs.Firmware[i] != v+".0" {
					t.Errorf("round %d: %s chip %d runs %s, want %s.0", round, n, i, obs.Firmware[i], v)
				}
			}
		}
		chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
		chaostest.NoHelperPodLeft(t, ctx, c.Client)
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("FIGURES firmware: %d kills survived, seed %d, %s", kills, seed, time.Since(start).Round(time.Second))
}

func bundle(c *simtest.Cluster, v string) string {
	return "file://" + filepath.Join(c.Dir, "bundles", "fw_pack-"+v+".fwbundle")
}

// TestSameRunbookTwiceAtOnce: two identical runs started together: one
// acts, the other exits 4 naming the holder's pid, and acted on nothing.
func TestSameRunbookTwiceAtOnce(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	p := plugin(t)
	args := []string{"upgrade", "kmd", "--version", otherKMD(t, ctx)}
	results := make(chan chaostest.Result, 2)
	starts := make(chan int, 2)
	for range 2 {
		go func() { results <- p.RunNotify(ctx, starts, args...) }()
	}
	pids := []int{<-starts, <-starts}
	a, b := <-results, <-results
	if a.Code == cli.ExitLocked {
		a, b = b, a
	}
	if a.Code != 0 || b.Code != cli.ExitLocked {
		t.Fatalf("want one run to finish (0) and the other locked out (4); got %d and %d:\n%s\n---\n%s", a.Code, b.Code, a.Out, b.Out)
	}
	if !strings.Contains(b.Out, fmt.Sprintf("pid %d", pids[0])) && !strings.Contains(b.Out, fmt.Sprintf("pid %d", pids[1])) {
		t.Fatalf("the locked-out run must name the holder (its pid):\n%s", b.Out)
	}
	if strings.Contains(b.Out, "cordon") {
		t.Fatalf("the locked-out run acted:\n%s", b.Out)
	}
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	t.Logf("FIGURES concurrency: same runbook twice: exit 0 and exit 4 (%s)", firstLine(b.Out, "another run"))
}

// TestKMDAndFirmwareOverlap: a firmware run started while a kmd run has
// a node out of service exits 4 naming the kmd run; no node is ever out of
// service twice (cordoned by two runbooks) nor more than one at a time.
func TestKMDAndFirmwareOverlap(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	p := plugin(t)
	maxOut, stop := watchOutOfService(t, ctx)
	defer stop()

	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	firstCordon := make(chan struct{})
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			if n, ok := e.Object.(*corev1.Node); ok && e.Type == watch.Modified && n.Spec.Unschedulable {
				close(firstCordon)
				return
			}
		}
	}()
	starts := make(chan int, 1)
	kmd := make(chan chaostest.Result, 1)
	go func() { kmd <- p.RunNotify(ctx, starts, "upgrade", "kmd", "--version", otherKMD(t, ctx)) }()
	kmdPID := <-starts
	select {
	case <-firstCordon:
	case r := <-kmd:
		t.Fatalf("the kmd run ended (%d) before it cordoned a node:\n%s", r.Code, r.Out)
	case <-ctx.Done():
		t.Fatal("no node was cordoned")
	}
	fw := p.Run(ctx, chaostest.KillPoint{}, "upgrade", "firmware", "--version", "19.9.0", "--bundle-url", bundle(c, "19.9.0"),
		"--max-parallel", "2", "--force-write")
	if fw.Code != cli.ExitLocked || !strings.Contains(fw.Out, fmt.Sprintf("pid %d", kmdPID)) {
		t.Fatalf("firmware during a kmd run: exit %d, want 4 naming pid %d:\n%s", fw.Code, kmdPID, fw.Out)
	}
	if r := <-kmd; r.Code != 0 {
		t.Fatalf("the kmd run: exit %d:\n%s", r.Code, r.Out)
	}
	stop()
	if m := maxOut(); m != 1 {
		t.Errorf("at most %d node(s) were out of service at once; want exactly 1 (the kmd run's own)", m)
	}
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	t.Logf("FIGURES concurrency: kmd + firmware on the same nodes: firmware exit 4, at most %d node out", maxOut())
}

// watchOutOfService records the most nodes cordoned by rollbook at once,
// and fails t if a node is cordoned by one runbook while it carries
// another's cordon.
func watchOutOfService(t *testing.T, ctx context.Context) (func() int, func()) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	w, err := simtest.Get(t).Client.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		owner = map[string]string{}
		most  int
	)
	go func() {
		for e := range w.ResultChan() {
			n, ok := e.Object.(*corev1.Node)
			if !ok {
				continue
			}
			mu.Lock()
			o := kube.CordonStateOf(n).Owner
			if prev := owner[n.Name]; prev != "" && o != "" && prev != o {
				t.Errorf("%s cordoned by %s while %s had it out of service", n.Name, o, prev)
			}
			owner[n.Name] = o
			cnt := 0
			for _, v := range owner {
				if v != "" {
					cnt++
				}
			}
			most = max(most, cnt)
			mu.Unlock()
		}
	}()
	return func() int { mu.Lock(); defer mu.Unlock(); return most }, cancel
}

// otherKMD returns a kmd version the fleet does not run, so a roll to it
// has work to do.
func otherKMD(t *testing.T, ctx context.Context) string {
	t.Helper()
	n, err := simtest.Get(t).Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[tt.LabelKMDVersion] == "2.7.0" {
		return "2.8.0"
	}
	return "2.7.0"
}

func firstLine(s, with string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, with) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// A presigned bundle URL (its signature in the query) flashes: it reaches
// the helper only through the Secret tt.BundleSecretName (secretKeyRef),
// never a pod's spec, and the Secret is gone when the run ends. The sweep
// below reads this run's output and the cluster too.
func TestYPresignedBundleURLFlashes(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const sig = "X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=0123456789abcdef"
	// A file:// mirror, so the sim's hosts can read it; the agent reads the
	// path and ignores the query, exactly as it carries an https one.
	url := bundle(c, "19.9.0") + "?" + sig
	w, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper + "=flash"})
	if err != nil {
		t.Fatal(err)
	}
	var specs []string
	var fromSecret int
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok {
				b, _ := json.Marshal(p)
				specs = append(specs, string(b))
				for _, env := range p.Spec.Containers[0].Env {
					if r := env.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Name == tt.BundleSecretName {
						fromSecret++
					}
				}
			}
		}
	}()
	r := plugin(t).Run(ctx, chaostest.KillPoint{}, "upgrade", "firmware", "--version", "19.9.0", "--bundle-url", url, "--force-write",
		"--max-parallel", "4")
	w.Stop()
	<-seen
	if r.Code != 0 {
		t.Fatalf("a presigned flash: exit %d:\n%s", r.Code, r.Out)
	}
	if fromSecret == 0 {
		t.Fatal("no flash helper read the URL from the Secret")
	}
	for _, s := range specs {
		if strings.Contains(s, "X-Amz-Signature") {
			t.Fatalf("a flash helper's spec holds the presigned query: %s", s)
		}
	}
	if _, err := c.Client.CoreV1().Secrets("rollbook-system").Get(ctx, tt.BundleSecretName, metav1.GetOptions{}); err == nil {
		t.Errorf("the run left Secret %s behind", tt.BundleSecretName)
	}
	printed.Add(strings.Join(specs, "\n"))
}

// TestZSecretsNeverPrintedOrWritten runs last (tests run in file order):
// nothing any run of this package printed, and no Event, Lease, ConfigMap
// or Pod in the cluster, holds a bearer token, credentials in a URL, a
// presigned URL's query or the kubeconfig's keys.
func TestZSecretsNeverPrintedOrWritten(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	s := chaostest.ExpectNoSecrets(t, ctx, c.Kubeconfig, c.Client, printed.All())
	totals.Lock()
	t.Logf("FIGURES tt: %d kills survived in %d runs (%d unkilled stops re-run); secrets scan: %s", totals.kills, totals.runs,
		totals.stops, s)
	totals.Unlock()
}
