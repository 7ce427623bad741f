package kubewatch

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/monitor"
	"github.com/rollbook/rollbook/sim/scenario"
	"github.com/rollbook/rollbook/sim/substrate"
)

// One control plane for the package, laid out as the ate-fleet scenario,
// watched by the monitor with short grace periods.
var (
	sim    *cluster.Cluster
	simDir string
)

const testGrace = time.Second

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("kubewatch: -short: no control plane, only the pure rule tests run")
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "kubewatch-test-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	logf := func(f string, a ...any) { fmt.Printf("[sim] "+f+"\n", a...) }
	upCtx, upCancel := context.WithTimeout(ctx, 4*time.Minute)
	defer upCancel()
	c, err := cluster.Up(upCtx, cluster.Options{Dir: dir, Nodes: 4, Logf: logf})
	if err != nil {
		fmt.Println("cluster:", err)
		return 1
	}
	defer c.Stop()
	mon, err := monitor.Open(dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	// Worker-pod events are handled 300 ms late, as under a loaded CI
	// machine, where a deletion's handler once saw the replacement pod.
	if err := Start(ctx, Config{RESTConfig: c.RESTConfig, Client: c.Client, Monitor: mon, Logf: logf,
		CordonGrace: testGrace, SkewGrace: testGrace, Tick: 200 * time.Millisecond,
		workerLag: 300 * time.Millisecond}); err != nil {
		fmt.Println(err)
		return 1
	}
	sc, err := scenario.Get("ate-fleet")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	env := &scenario.Env{Dir: dir, RESTConfig: c.RESTConfig, Client: c.Client, Logf: logf, Monitor: mon,
		Nodes: []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3"},
		Go: func(name string, f func(context.Context) error) {
			go func() {
				if err := f(ctx); err != nil && ctx.Err() == nil {
					logf("%s stopped: %v", name, err)
				}
			}()
		}}
	if err := sc.Setup(upCtx, env); err != nil {
		fmt.Println("ate-fleet:", err)
		return 1
	}
	// Laying out a healthy fleet is no violation.
	time.Sleep(2 * testGrace)
	if vs, err := monitor.Read(dir); err != nil || len(vs) > 0 {
		fmt.Printf("the ate-fleet setup recorded violations: %+v %v\n", vs, err)
		return 1
	}
	sim, simDir = c, dir
	return m.Run()
}

func cluster_(t *testing.T) *cluster.Cluster {
	t.Helper()
	if sim == nil {
		t.Skip("-short: no control plane started")
	}
	return sim
}

// violations returns the violations recorded since n were there.
func violations(t *testing.T, from int) []monitor.Violation {
	t.Helper()
	vs, err := monitor.Read(simDir)
	if err != nil {
		t.Fatal(err)
	}
	return vs[from:]
}

func count(t *testing.T) int { return len(violations(t, 0)) }

// waitViolation waits until rule was recorded for an object containing obj.
func waitViolation(t *testing.T, from int, rule, obj string, within time.Duration) monitor.Violation {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, v := range violations(t, from) {
			if v.Rule == rule && strings.Contains(v.Object, obj) {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s violation for %s within %v; recorded: %+v", rule, obj, within, violations(t, from))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expectNone fails when anything was recorded since from, after waiting
// long enough for every grace period to pass.
func expectNone(t *testing.T, from int, why string) {
	t.Helper()
	time.Sleep(3*testGrace + lateDeclaration)
	if vs := violations(t, from); len(vs) > 0 {
		t.Fatalf("%s: unexpected violations %+v", why, vs)
	}
}

func patchNode(t *testing.T, c *cluster.Cluster, node, patch string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch node %s: %v", node, err)
	}
}

func cordon(t *testing.T, c *cluster.Cluster, node, owner string) { cordonLeft(t, c, node, owner, "") }

// cordonLeft cordons node as owner would ("" = a foreign cordon), with a
// left-cordoned reason when left is not empty, in one patch.
func cordonLeft(t *testing.T, c *cluster.Cluster, node, owner, left string) {
	t.Helper()
	str := func(s string) string {
		if s == "" {
			return "null"
		}
		return fmt.Sprintf("%q", s)
	}
	patchNode(t, c, node, fmt.Sprintf(`{"metadata":{"annotations":{%q:%s,%q:"test-run",%q:%s}},"spec":{"unschedulable":true}}`,
		AnnCordonedBy, str(owner), AnnCordonRun, AnnLeftCordoned, str(left)))
	t.Cleanup(func() {
		patchNode(t, c, node, fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null,%q:null}},"spec":{"unschedulable":null}}`,
			AnnCordonedBy, AnnCordonRun, AnnLeftCordoned))
	})
}

// holdLease takes rollbook-tt in ns as a run would, with max-out-of-service
// max ("" = no annotation), and releases it at the test's end.
func holdLease(t *testing.T, c *cluster.Cluster, ns, max string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rollbook-tt"},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To("test@host/1/run"), LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime: &now, RenewTime: &now}}
	if max != "" {
		l.Annotations = map[string]string{AnnMaxOutOfService: max}
	}
	leases := c.Client.CoordinationV1().Leases(ns)
	if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), l.Name, metav1.DeleteOptions{}) })
}

func TestCordonLeftOnCluster(t *testing.T) {
	c := cluster_(t)
	from := count(t)

	// A run in progress may hold its cordon as long as it likes.
	t.Run("lease held", func(t *testing.T) {
		holdLease(t, c, "default", "")
		cordon(t, c, "kwok-node-3", "tt-kmd")
		expectNone(t, from, "cordon under a held lease")
	})
	// Someone else's cordon is not ours to judge.
	t.Run("foreign", func(t *testing.T) {
		cordon(t, c, "kwok-node-3", "")
		expectNone(t, from, "foreign cordon")
	})
	// A run that ended and said why.
	t.Run("left on purpose", func(t *testing.T) {
		cordonLeft(t, c, "kwok-node-3", "tt-kmd", "flash failed; see kubectl tt status")
		expectNone(t, from, "cordon left with a reason")
	})
	t.Run("left behind", func(t *testing.T) {
		cordon(t, c, "kwok-node-3", "tt-kmd")
		v := waitViolation(t, from, monitor.RuleCordonLeft, "node/kwok-node-3", 10*time.Second)
		if !strings.Contains(v.Detail, "tt-kmd") {
			t.Errorf("detail does not name the owner: %q", v.Detail)
		}
	})
}

func TestTooManyOutOnCluster(t *testing.T) {
	c := cluster_(t)
	from := count(t)
	t.Run("within the allowance", func(t *testing.T) {
		holdLease(t, c, "kube-system", "2")
		cordon(t, c, "kwok-node-2", "tt-firmware")
		cordon(t, c, "kwok-node-3", "tt-firmware")
		cordon(t, c, "kwok-node-1", "") // foreign: does not count
		expectNone(t, from, "two out of two allowed")
	})
	// Leftover cordons of the previous subtest are gone before the next lease.
	time.Sleep(3 * testGrace)
	from = count(t)
	t.Run("over the default of 1", func(t *testing.T) {
		holdLease(t, c, "kube-system", "")
		cordon(t, c, "kwok-node-2", "tt-firmware")
		cordon(t, c, "kwok-node-3", "tt-firmware")
		v := waitViolation(t, from, monitor.RuleTooManyOut, "nodes", 5*time.Second)
		if !strings.Contains(v.Detail, "kwok-node-2, kwok-node-3") || !strings.Contains(v.Detail, "allow 1") {
			t.Errorf("detail: %q", v.Detail)
		}
	})
}

// TestAteRulesOnFleet walks the ate-fleet through the unsafe moves the
// runbook warns about, in order: flip a node without deleting its old
// workers (skew), delete an old worker on a node that was not flipped,
// scale a serving pool down. It changes the fleet for good: run once
// (-count=1) per control plane.
func TestAteRulesOnFleet(t *testing.T) {
	c := cluster_(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	from := count(t)
	dyn := dynamic.NewForConfigOrDie(c.RESTConfig)
	pods, err := c.Client.CoreV1().Pods("ate-workers").List(ctx, metav1.ListOptions{LabelSelector: substrate.PoolLabel})
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
	}
	var flipped, other string
	for n := range byNode {
		if flipped == "" {
			flipped = n
		} else if other == "" {
			other = n
		}
	}
	if other == "" {
		t.Fatalf("worker pods on fewer than two nodes: %v", byNode)
	}

	// Deploy the new atelet and flip one node without deleting its workers.
	if err := substrate.DeployAtelet(ctx, dyn, "v0.3.0"); err != nil {
		t.Fatal(err)
	}
	patchNode(t, c, flipped, fmt.Sprintf(`{"metadata":{"labels":{%q:"v0.3.0"}}}`, substrate.VersionLabel))
	v := waitViolation(t, from, monitor.RuleVersionSkew, "ate-workers/", time.Minute)
	if !strings.Contains(v.Detail, flipped) || !strings.Contains(v.Detail, "v0.3.0") {
		t.Errorf("skew detail: %q", v.Detail)
	}

	// Deleting the flipped node's old workers is the runbook's step e.
	from = count(t)
	for _, p := range byNode[flipped] {
		if err := c.Client.CoreV1().Pods("ate-workers").Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3*testGrace + lateDeclaration) // a deletion no declaration covers is reported after lateDeclaration
	for _, v := range violations(t, from) {
		if v.Rule == monitor.RuleOldPodBeforeFlip {
			t.Fatalf("deleting workers of a flipped node recorded %+v", v)
		}
	}

	// Deleting a worker on a node still at the old version is the mistake.
	victim := byNode[other][0]
	if err := c.Client.CoreV1().Pods("ate-workers").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitViolation(t, from, monitor.RuleOldPodBeforeFlip, "pod/ate-workers/"+victim, 30*time.Second)

	// Scaling a serving pool down: the pool rule, not the pod rule, for the
	// pods its controller removes.
	from = count(t)
	if _, err := dyn.Resource(substrate.GVRWorkerPool).Namespace("ate-workers").Patch(ctx, "python-small", types.MergePatchType,
		[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	v = waitViolation(t, from, monitor.RuleServingPoolEdit, "workerpool/ate-workers/python-small", 30*time.Second)
	if !strings.Contains(v.Detail, "scaled down from 4 to 1") {
		t.Errorf("pool detail: %q", v.Detail)
	}
	time.Sleep(3*testGrace + lateDeclaration) // a deletion no declaration covers is reported after lateDeclaration
	for _, v := range violations(t, from) {
		if v.Rule == monitor.RuleOldPodBeforeFlip {
			t.Errorf("the controller's scale-down was blamed on a run: %+v", v)
		}
	}
}
