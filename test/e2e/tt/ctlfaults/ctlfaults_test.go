//go:build e2e

// Package ctlfaults rolls a four-node tt-fleet through the faults a test
// times itself (the sim's control socket, sim up --api-proxy): write
// responses lost after the API server applied them, the API server
// restarted in place mid-roll, etcd compacted under open watches (410
// Gone), a run stopped (SIGSTOP) past its Lease and resumed while another
// run holds it, and a flash helper deleted mid-write by another tool's
// forced drain. Each roll must end with nothing lost: every module loaded
// and every chip written exactly once, no node left cordoned, no helper
// left, the sim's violations file empty.
package ctlfaults

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/chaostest"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

func TestMain(m *testing.M) {
	// A module load and a flash take seconds on a real host; here they
	// must, or a roll ends before the faults land mid-way.
	simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet", ExtraArgs: []string{"--api-proxy"},
		Env: []string{"ROLLBOOK_SIM_TT_LOAD_DELAY=2s", "ROLLBOOK_SIM_TT_FLASH_DELAY=3s"}})
}

var nodes = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3"}

// proxied is the kubeconfig through the fault proxy; the package's
// cluster handle (the test's own reads) bypasses it.
var proxied string

func setup(t *testing.T) (*simtest.Cluster, *chaostest.Plugin, *chaostest.SimControl) {
	t.Helper()
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	// The tests share one sim: a node an earlier, failed test left
	// cordoned would stop this one for a cause not its own.
	l, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Items {
		if n.Spec.Unschedulable {
			t.Fatalf("%s is cordoned (%s) before this test began: an earlier test of the package failed and left it so",
				n.Name, n.Annotations[kube.AnnCordonedBy])
		}
	}
	if proxied == "" {
		proxied = chaostest.BypassFaults(t)
	}
	bin, err := simtest.AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	return c, &chaostest.Plugin{Bin: bin, Kubeconfig: proxied}, chaostest.Control(c.Dir)
}

func opCounts(t *testing.T, c *simtest.Cluster) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range nodes {
		ops, err := chaostest.HostOps(c.Dir, n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = len(ops)
	}
	return out
}

// loadedOnce checks that every node loaded kmd v exactly once since
// before, and is labelled with it.
func loadedOnce(t *testing.T, ctx context.Context, c *simtest.Cluster, before map[string]int, v string) {
	t.Helper()
	for _, n := range nodes {
		ops, err := chaostest.HostOps(c.Dir, n)
		if err != nil {
			t.Fatal(err)
		}
		loads := 0
		for _, o := range ops[before[n]:] {
			if o.Op == fakehost.OpInsmod && o.Version == v {
				loads++
			}
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if loads != 1 || node.Labels[tt.LabelKMDVersion] != v {
			t.Errorf("%s: kmd %s loaded %d times, label %q; want once and %s (ops %+v)", n, v, loads, node.Labels[tt.LabelKMDVersion], v,
				ops[before[n]:])
		}
	}
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	chaostest.NoHelperPodLeft(t, ctx, c.Client)
}

// nextKMD is a tt-kmd version the fleet does not run: each test rolls to
// one, whichever ran before it.
func nextKMD(t *testing.T, ctx context.Context, c *simtest.Cluster) string {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"2.8.0", "2.9.1", "2.8.1", "2.7.0"} {
		if v != n.Labels[tt.LabelKMDVersion] {
			return v
		}
	}
	return ""
}

// onCordons calls f each time one more node is cordoned by rollbook than
// before, up to n times, until ctx or the test ends (its cleanup waits for
// f: nothing may log after the test).
func onCordons(t *testing.T, ctx context.Context, c *simtest.Cluster, n int, f func(i int, node string)) <-chan struct{} {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		seen := map[string]bool{}
		_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, node := range l.Items {
				if node.Spec.Unschedulable && node.Annotations[kube.AnnCordonedBy] != "" && !seen[node.Name] {
					seen[node.Name] = true
					f(len(seen)-1, node.Name)
					if len(seen) >= n {
						return true, nil
					}
				}
			}
			return false, nil
		})
	}()
	return done
}

// The network drops the answer to writes the API server applied: the run
// sees an error (EOF) for a write that took effect. Every kind of write
// is hit: the Lease, cordons, evictions, helper pods, labels, Events.
func TestKMDRollLosesWriteResponses(t *testing.T) {
	c, p, ctl := setup(t)
	ctx := simtest.Context(t, 10*time.Minute)
	start := time.Now()
	before := opCounts(t, c)
	k0, err := ctl.Knobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every lossEvery, the next lossBurst writes lose their answer.
	armCtx, stopArming := context.WithCancel(ctx)
	go func() {
		for i := 0; armCtx.Err() == nil; i++ {
			// Every other time a node write's: the cordons and labels the
			// run must record whether or not their answer came.
			method, path := "", ""
			if i%2 == 1 {
				method, path = "PATCH", "/api/v1/nodes/"
			}
			_ = ctl.LoseResponses(armCtx, lossBurst, method, path)
			select {
			case <-armCtx.Done():
			case <-time.After(lossEvery):
			}
		}
	}()
	v := nextKMD(t, ctx, c)
	stops := chaostest.UntilDone(t, ctx, p, 15, func() { chaostest.CordonsSaySo(t, ctx, c.Client) }, "upgrade", "kmd", "--version", v)
	stopArming()
	_ = ctl.LoseResponses(ctx, 0, "", "")
	k1, err := ctl.Knobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := k1.Lost - k0.Lost
	if lost == 0 {
		t.Fatal("no response was lost: the test proved nothing")
	}
	loadedOnce(t, ctx, c, before, v)
	// Nothing the run did goes unrecorded, answer or none.
	for _, n := range nodes {
		for _, reason := range []string{"Cordoned", "KMDUpgraded", "Uncordoned"} {
			evs, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + n + ",reason=" + reason})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range evs.Items {
				found = found || !e.FirstTimestamp.Time.Before(start.Add(-time.Second))
			}
			if !found {
				t.Errorf("%s: no %s Event from the roll", n, reason)
			}
		}
	}
	t.Logf("FIGURES lost responses: %d writes applied and their answers lost, %d run(s) stopped and re-run: %v", lost, len(stops), stops)
}

// The API server is restarted in place twice mid-roll (its connections
// end, it refuses connections for seconds, its watch cache starts afresh).
func TestKMDRollAcrossAPIServerRestarts(t *testing.T) {
	c, p, ctl := setup(t)
	ctx := simtest.Context(t, 10*time.Minute)
	before := opCounts(t, c)
	var restarts []string
	restarted := onCordons(t, ctx, c, 2, func(i int, node string) {
		took, err := ctl.RestartAPIServer(ctx, 2*time.Second)
		if err != nil && ctx.Err() == nil {
			t.Errorf("restart %d: %v", i+1, err)
			return
		}
		restarts = append(restarts, fmt.Sprintf("after %s's cordon, unavailable %s", node, took.Round(time.Millisecond)))
	})
	v := nextKMD(t, ctx, c)
	stops := chaostest.UntilDone(t, ctx, p, 15, func() { chaostest.CordonsSaySo(t, ctx, c.Client) }, "upgrade", "kmd", "--version", v)
	<-restarted
	if len(restarts) != 2 {
		t.Fatalf("the API server was restarted %d times, want 2: the test proved less than it says", len(restarts))
	}
	loadedOnce(t, ctx, c, before, v)
	t.Logf("FIGURES apiserver restarts: %v; %d run(s) stopped and re-run: %v", restarts, len(stops), stops)
}

// etcd is compacted under the roll, every second: every open watch ends,
// and a watch resumed from a resourceVersion of before is answered 410
// Gone, as by an API server whose history no longer holds it.
func TestKMDRollAcrossCompactions(t *testing.T) {
	c, p, ctl := setup(t)
	ctx := simtest.Context(t, 10*time.Minute)
	before := opCounts(t, c)
	k0, err := ctl.Knobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopCompacting := context.WithCancel(ctx)
	compactions := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			if _, _, err := ctl.Compact(cctx); err == nil {
				compactions++
			}
			select {
			case <-cctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	v := nextKMD(t, ctx, c)
	stops := chaostest.UntilDone(t, ctx, p, 15, func() { chaostest.CordonsSaySo(t, ctx, c.Client) }, "upgrade", "kmd", "--version", v)
	stopCompacting()
	<-done
	k1, err := ctl.Knobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if k1.ClosedWatches == k0.ClosedWatches {
		t.Fatal("no watch of the run was ended by a compaction: the test proved nothing")
	}
	loadedOnce(t, ctx, c, before, v)
	t.Logf("FIGURES compactions: %d, %d watches ended, %d answered 410 Gone; %d run(s) stopped and re-run: %v", compactions,
		k1.ClosedWatches-k0.ClosedWatches, k1.Gone-k0.Gone, len(stops), stops)
}

// bookkeeping are writes a run that lost its lock may still make: its own
// Lease's renewal attempts (refused), Events and the run's history.
func bookkeeping(m chaostest.Mutation) bool {
	return strings.Contains(m.Path, "/leases/") || strings.HasSuffix(m.Path, "/events") || strings.Contains(m.Path, "/events/") ||
		strings.HasSuffix(m.Path, "/configmaps/rollbook-tt-history")
}

// A run is stopped (SIGSTOP) right after a write of a node, for longer
// than its Lease; another run takes the Lease over and rolls; the first
// is resumed while the second acts. It must not write anything once
// resumed (its Lease, Events and history aside), say that it lost the
// lock, and the roll must end with every module loaded once.
func TestStoppedPastItsLeaseWritesNothingOnceResumed(t *testing.T) {
	c, p, ctl := setup(t)
	ctx := simtest.Context(t, 10*time.Minute)
	before := opCounts(t, c)
	v := nextKMD(t, ctx, c)
	args := []string{"upgrade", "kmd", "--version", v}

	held := make(chan string, 1)
	go func() {
		req, err := ctl.Hold(ctx, "PATCH", "/api/v1/nodes/")
		if err != nil {
			t.Errorf("hold: %v", err)
		}
		held <- req
	}()
	startedA := make(chan int, 1)
	resA := make(chan chaostest.Result, 1)
	go func() { resA <- p.RunNotify(ctx, startedA, args...) }()
	pidA := <-startedA
	req := <-held
	if err := syscall.Kill(pidA, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := ctl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("run A (pid %d) stopped right after sending %s", pidA, req)

	// Run B, not through the proxy and as if on another machine (a pid of
	// this one says nothing to it), takes the Lease over once A's has
	// stayed unchanged for its duration and margin, and acts.
	b := &chaostest.Plugin{Bin: p.Bin, Kubeconfig: c.Kubeconfig, Elsewhere: true}
	resB := make(chan chaostest.Result, 1)
	go func() { resB <- b.Run(ctx, chaostest.KillPoint{}, args...) }()
	var holderB string
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case rb := <-resB:
			_ = syscall.Kill(pidA, syscall.SIGCONT)
			t.Fatalf("run B exited %d before it took the Lease over:\n%s", rb.Code, rb.Out)
		default:
		}
		l, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{})
		if err != nil || l.Annotations["rollbook.dev/taken-over"] == "" || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holderB = *l.Spec.HolderIdentity
		return true, nil
	}); err != nil {
		t.Fatalf("run B never took the Lease over: %v", err)
	}
	time.Sleep(2 * time.Second) // B is acting now
	resumed := time.Now()
	if err := syscall.Kill(pidA, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("run A resumed %s after it was stopped, %s holds the Lease", resumed.Sub(stopped).Round(time.Second), holderB)
	a := <-resA
	writes, err := ctl.Mutations(ctx, resumed)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, m := range writes {
		if !bookkeeping(m) {
			bad = append(bad, fmt.Sprintf("%s %s (%d) at +%s", m.Method, m.Path, m.Code, m.Time.Sub(resumed).Round(time.Millisecond)))
		}
	}
	if len(bad) > 0 {
		t.Errorf("run A wrote after it was resumed, while %s held the Lease:\n  %s\nits output:\n%s", holderB,
			strings.Join(bad, "\n  "), a.Out)
	}
	if a.Code == 0 || !strings.Contains(a.Out, "lost lease") {
		t.Errorf("run A exited %d without saying it lost the lock:\n%s", a.Code, a.Out)
	}
	rb := <-resB
	if rb.Code != 0 {
		t.Logf("run B exited %d; re-running it:\n%s", rb.Code, rb.Out)
		chaostest.UntilDone(t, ctx, b, 10, nil, args...)
	}
	loadedOnce(t, ctx, c, before, v)
	t.Logf("FIGURES SIGSTOP: A stopped %s, resumed while B held the Lease; %d bookkeeping writes of A after resume, %d others",
		resumed.Sub(stopped).Round(time.Second), len(writes)-len(bad), len(bad))
}

// Another tool drains a node mid-flash, as kured or a node-termination
// handler does: its evictions of the flash helper are refused (the
// helper's PodDisruptionBudget); forced (kubectl drain
// --disable-eviction deletes), the helper gets its grace period, finishes
// writing the chips and stops, saying so. No chip is left half-written
// and the re-run finishes with every chip written exactly once.
func TestFlashHelperDrainedByAnotherTool(t *testing.T) {
	c, p, _ := setup(t)
	ctx := simtest.Context(t, 10*time.Minute)
	before := opCounts(t, c)
	const v = "19.0.0"
	args := []string{"upgrade", "firmware", "--version", v, "--bundle-url",
		"file://" + filepath.Join(c.Dir, "bundles", "fw_pack-"+v+".fwbundle")}
	res := make(chan chaostest.Result, 1)
	go func() { res <- p.Run(ctx, chaostest.KillPoint{}, args...) }()

	// The first node whose chips are being written.
	var node string
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, n := range nodes {
			if fakehost.FlashWriting(filepath.Join(c.Dir, "hosts", n)) {
				node = n
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no flash started: %v", err)
	}
	pods, err := c.Client.CoreV1().Pods("rollbook-system").List(ctx, metav1.ListOptions{
		LabelSelector: kube.LabelHelper + "=flash," + kube.LabelNode + "=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the flash helper of %s: %v %d", node, err, len(pods.Items))
	}
	helper := pods.Items[0]
	// The other tool evicts, as kubectl drain does, retrying a few times.
	for i := 0; i < 3; i++ {
		err := c.Client.PolicyV1().Evictions(helper.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: helper.Name, Namespace: helper.Namespace}})
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("eviction %d of the running flash helper %s: %v; want it refused by its PodDisruptionBudget", i+1, helper.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Then forces it: a delete, with the pod's own grace period.
	if err := c.Client.CoreV1().Pods(helper.Namespace).Delete(ctx, helper.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("evictions of %s refused; deleted it mid-flash on %s", helper.Name, node)
	r := <-res
	if r.Code != 0 && !strings.Contains(r.Out, "deleted while it ran") && !strings.Contains(r.Out, "was deleted before it finished") {
		t.Errorf("the run exited %d without saying its helper was deleted:\n%s", r.Code, r.Out)
	}
	stops := chaostest.UntilDone(t, ctx, p, 10, func() { chaostest.CordonsSaySo(t, ctx, c.Client) }, args...)
	for _, n := range nodes {
		ops, err := chaostest.HostOps(c.Dir, n)
		if err != nil {
			t.Fatal(err)
		}
		chips := map[int]int{}
		for _, o := range ops[before[n]:] {
			if o.Op == fakehost.OpFlash && o.Version == v+".0" {
				chips[o.Chip]++
			}
		}
		obs, err := fakehost.Inspect(filepath.Join(c.Dir, "hosts", n))
		if err != nil {
			t.Fatal(err)
		}
		for i := range obs.Firmware {
			if chips[i] != 1 || obs.Firmware[i] != v+".0" {
				t.Errorf("%s chip %d written %d times, runs %s; want once and %s.0", n, i, chips[i], obs.Firmware[i], v)
			}
		}
	}
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	chaostest.NoHelperPodLeft(t, ctx, c.Client)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.PolicyV1().PodDisruptionBudgets("rollbook-system").List(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		t.Errorf("helper PodDisruptionBudgets left behind: %v", err)
	}
	t.Logf("FIGURES forced drain: the first run exited %d; %d further stop(s): %v", r.Code, len(stops), stops)
}

// The lost-response injection: lossBurst writes every lossEvery.
var lossBurst, lossEvery = 1, 2 * time.Second

// The answer to the module's publication (its ConfigMap's create) is lost,
// the create applied: the roll reads what the name holds, finds its own
// bytes, and goes on. Before, it recorded a KMDModuleRefused warning
// ("publishing the module: EOF") and failed the step; the step's retry
// went on, unless other faults had spent the retries (seen in CI: the run
// stopped, exit 3).
func TestModulePublicationAnswerLost(t *testing.T) {
	c, p, ctl := setup(t)
	ctx := simtest.Context(t, 10*time.Minute)
	before := opCounts(t, c)
	k0, err := ctl.Knobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.LoseResponses(ctx, 1, "POST", "/namespaces/"+deploy.HelperNamespace+"/configmaps"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctl.LoseResponses(context.Background(), 0, "", "") }()
	const v = "2.10.0" // no other test here builds it: the roll publishes its module
	r := p.Run(ctx, chaostest.KillPoint{}, "upgrade", "kmd", "--version", v)
	k1, err := ctl.Knobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if k1.Lost-k0.Lost != 1 {
		t.Fatalf("%d answers lost, want the publication's one: the test proved nothing", k1.Lost-k0.Lost)
	}
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0 in one run:\n%s", r.Code, r.Out)
	}
	for _, bad := range []string{"KMDModuleRefused", "transient API error"} {
		if strings.Contains(r.Out, bad) {
			t.Errorf("the run said %q of its own publication:\n%s", bad, r.Out)
		}
	}
	loadedOnce(t, ctx, c, before, v)
}
