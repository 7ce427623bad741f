//go:build e2e

package fullroll

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// ate-fleet on 3 nodes at v0.2.0: pools ate-workers/python-small and
// python-large (gvisor) and ate-batch/python-small (microvm), one worker
// per node each, running, paused and suspended actors, traffic waking
// actors every few seconds. The eviction window is short so a deleted
// worker's actors crash within the test.
func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

// drainingOn lists the workers in DRAINING on node.
func drainingOn(t *testing.T, ctx context.Context, node string) []string {
	t.Helper()
	var out []string
	for w := range atetest.Draining(t, ctx) {
		if strings.HasSuffix(w, " on "+node+")") {
			out = append(out, w)
		}
	}
	return out
}

func pool(name string, pin map[string]any, replicas int64) *unstructured.Unstructured {
	tmpl := map[string]any{}
	if pin != nil {
		tmpl["nodeSelector"] = pin
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ate.dev/v1alpha1", "kind": "WorkerPool",
		"metadata": map[string]any{"name": name, "namespace": "ate-workers"},
		"spec": map[string]any{"replicas": replicas, "workerImage": "registry.example/ateom@sha256:" + strings.Repeat("b", 64),
			"sandboxClasses": []any{map[string]any{"name": "gvisor"}}, "template": tmpl},
	}}
}

func TestStatusBeforeTheRoll(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	s := atetest.Status(t, ctx)
	if s.Phase != campaign.PhaseNotStarted || s.Cluster.Old != atetest.OldV || s.APIError != "" || s.Capabilities == nil ||
		!s.Capabilities.DrainImplemented {
		t.Fatalf("status: phase %s old %s apiErr %q caps %+v", s.Phase, s.Cluster.Old, s.APIError, s.Capabilities)
	}
	if _, code := atetest.Run(t, ctx, "preflight"); code != 0 {
		t.Fatalf("preflight of a healthy fleet: exit %d", code)
	}
}

func TestPreflightCatchesUnpinnedAndUnreadyPools(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	pools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers")
	// No pod: an edit of a pool that serves would be a violation.
	unpinned, unpinned2 := pool("scratch", nil, 0), pool("scratch-2", nil, 0)
	stuck := pool("stuck", map[string]any{fleet.VersionLabel: atetest.OldV, "no-such-label": "x"}, 2)
	for _, p := range []*unstructured.Unstructured{unpinned, unpinned2, stuck} {
		if _, err := pools.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = pools.Delete(context.Background(), p.GetName(), metav1.DeleteOptions{}) }()
	}
	out, code := atetest.Run(t, ctx, "preflight")
	if code != cli.ExitBlocked || !strings.Contains(out, "✗ pool ate-workers/scratch is pinned "+
		"to OLD") || !strings.Contains(out, "✗ pool ate-workers/stuck is READY==DESIRED") {
		t.Fatalf("preflight must fail on both pools: exit %d", code)
	}
	pinOf := func(name string) string {
		got, err := pools.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pin, _, _ := unstructured.NestedString(got.Object, "spec", "template", "nodeSelector", fleet.VersionLabel)
		return pin
	}
	unpinnedBoth := func() bool { return pinOf("scratch") == "" && pinOf("scratch-2") == "" }
	// --dry-run plans the pins and changes nothing.
	out, _ = atetest.Run(t, ctx, "preflight", "--pin-pools", "--dry-run")
	if !strings.Contains(out, "would patch workerpool/ate-workers/scratch") || !unpinnedBoth() {
		t.Fatalf("preflight --pin-pools --dry-run: no plan, or it pinned")
	}
	expectLocked(t, ctx, unpinnedBoth, "preflight", "--pin-pools")
	// --pin-pools pins the unpinned pools (no actor is on their workers):
	// interrupted right after the first pin, then resumed.
	interruptAt(t, ctx, []string{"preflight", "--pin-pools"}, "PoolPinned")
	out, _ = atetest.Run(t, ctx, "preflight", "--pin-pools", "-o", "json")
	if r := result(t, out); r.Runbook != roll.PinPoolsRunbookName || r.Outcome != runbook.OutcomeDone {
		t.Fatalf("preflight --pin-pools -o json: %s %s", r.Runbook, r.Outcome)
	}
	for _, name := range []string{"scratch", "scratch-2"} {
		if pin := pinOf(name); pin != atetest.OldV {
			t.Fatalf("%s pin = %q", name, pin)
		}
		if n := eventsFor(t, ctx, "ate-workers", "PoolPinned", name, ""); n != 1 {
			t.Errorf("%s was pinned %d times across the runs; want once", name, n)
		}
	}
}

// skewWatch records every worker pod that starts Running on a node whose
// version differs from its pool's pin: the skew the roll exists to prevent.
func skewWatch(t *testing.T, ctx context.Context) func() []string {
	c := simtest.Get(t)
	w, err := c.Client.CoreV1().Pods("ate-workers").Watch(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		bad      []string
		running  = map[string]bool{}
		pinCache = map[string]string{}
	)
	go func() {
		for e := range w.ResultChan() {
			p, ok := e.Object.(*corev1.Pod)
			if !ok || e.Type == watch.Deleted || p.Status.Phase != corev1.PodRunning || running[string(p.UID)] {
				continue
			}
			running[string(p.UID)] = true
			poolName := p.Labels[fleet.PoolLabel]
			pin, ok := pinCache[poolName]
			if !ok {
				u, err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers").Get(context.Background(), poolName,
					metav1.GetOptions{})
				if err != nil {
					continue
				}
				pin, _, _ = unstructured.NestedString(u.Object, "spec", "template", "nodeSelector", fleet.VersionLabel)
				pinCache[poolName] = pin
			}
			n, err := c.Client.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{})
			if err == nil && n.Labels[fleet.VersionLabel] != pin {
				mu.Lock()
				bad = append(bad, p.Name+" ("+pin+") started on "+n.Name+" at "+n.Labels[fleet.VersionLabel])
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		w.Stop()
		mu.Lock()
		defer mu.Unlock()
		return bad
	}
}

func TestFullRoll(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	skew := skewWatch(t, ctx)
	atetest.ExpectRefused(t, ctx, "two atelet DaemonSets", "roll", "next-node")

	// Step 3, outside rollbook: the new atelet DaemonSet.
	sim, err := simtest.SimBinary()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sim, "ate-setup", "deploy-atelet", "--dir", c.Dir, "--version", atetest.NewV).CombinedOutput(); err != nil {
		t.Fatalf("deploy atelet: %v\n%s", err, out)
	}
	if s := atetest.Status(t, ctx); s.Phase != campaign.PhasePrepared || s.Cluster.New != atetest.NewV {
		t.Fatalf("after deploy atelet: %s new=%s", s.Phase, s.Cluster.New)
	}
	// Before step 4 no node may move: its actors would have no worker to
	// resume on (the new-user accident this guard exists for).
	atetest.ExpectRefused(t, ctx, "every serving pool has a clone pinned to NEW", "roll", "next-node")
	atetest.ExpectRefused(t, ctx, "every serving pool has a clone pinned to NEW", "roll", "next-node", "--all", "--wait")
	// Step 4.
	if _, code := atetest.Run(t, ctx, "roll", "clone-pools", "--image", "gvisor=registry.example/ateom:v3"); code != cli.ExitUsage {
		t.Fatalf("a tag-only image must be refused: exit %d", code)
	}
	if out, code := atetest.Run(t, ctx, "roll", "clone-pools", "--image", atetest.ImageGV); code != cli.ExitBlocked || !strings.Contains(out,
		"2 sandbox classes") {
		t.Fatalf("a bare image for pools of two sandbox classes must be refused: exit %d", code)
	}
	if _, code := atetest.Run(t, ctx, atetest.CloneArgs...); code != 0 {
		t.Fatalf("clone-pools: exit %d", code)
	}
	if _, code := atetest.Run(t, ctx, atetest.CloneArgs...); code != 0 {
		t.Fatalf("clone-pools again (idempotent): exit %d", code)
	}
	// One serving pool without a clone is enough to refuse.
	extra := pool("scratch", map[string]any{fleet.VersionLabel: atetest.OldV}, 0)
	extra.SetNamespace("ate-batch")
	extraPools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-batch")
	if _, err := extraPools.Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	atetest.ExpectRefused(t, ctx, "no clone: ate-batch/scratch", "roll", "next-node")
	if err := extraPools.Delete(ctx, "scratch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := atetest.Status(t, ctx)
	if s.Phase != campaign.PhaseCloned {
		t.Fatalf("after clone-pools: %s", s.Phase)
	}
	for _, p := range s.Cluster.OldPools() {
		if p.CloneName == "" {
			t.Fatalf("pool %s has no clone", p.Key())
		}
	}

	// Step 5 on the first node, interrupted right after its first drain:
	// the node is half-moved, so no other node may start.
	drainCtx, cancelDrain := cancelOnEvent(t, ctx, "WorkerDrained")
	_, _ = atetest.Run(t, drainCtx, "roll", "next-node")
	cancelDrain()
	if len(drainingOn(t, ctx, "kwok-node-0")) == 0 {
		t.Fatal("the interrupted run drained nothing on kwok-node-0")
	}
	atetest.ExpectRefused(t, ctx, "node kwok-node-0 is half-moved", "roll", "next-node", "kwok-node-2")

	// Resumed, and interrupted right after its label flips.
	runCtx, cancel := context.WithCancel(ctx)
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			if n, ok := e.Object.(*corev1.Node); ok && n.Labels[fleet.VersionLabel] == atetest.NewV {
				cancel()
				return
			}
		}
	}()
	out, code := atetest.Run(t, runCtx, "roll", "next-node")
	cancel()
	if code == 0 || !strings.Contains(out, "interrupted") {
		t.Fatalf("first node should have been interrupted after the flip: exit %d", code)
	}
	out, code = atetest.Run(t, ctx, "roll", "next-node")
	if code != 0 || !strings.Contains(out, "node kwok-node-0: "+atetest.OldV+" → "+atetest.NewV) {
		t.Fatalf("resume should finish kwok-node-0 first: exit %d", code)
	}

	if bad := skew(); len(bad) > 0 {
		t.Errorf("worker pods started next to an atelet of another version: %v", bad)
	}
}

// lastNode is the node TestCrashedActorBlocksTheNode left at OLD.
var lastNode string

// TestCrashedActorBlocksTheNode crashes an actor on purpose (deleting its
// worker pod while it runs), so the sim records that loss: the test
// expects exactly that violation instead of none.
func TestCrashedActorBlocksTheNode(t *testing.T) {
	c := simtest.Get(t)
	lost := c.ExpectViolation(t, "actor-lost")
	defer lost()
	ctx := simtest.Context(t, 3*time.Minute)
	crashed := crashActorOn(t, ctx, "kwok-node-1", "kwok-node-2")
	lastNode = map[string]string{"kwok-node-1": "kwok-node-2", "kwok-node-2": "kwok-node-1"}[crashed]
	out, code := atetest.Run(t, ctx, "roll", "next-node", crashed, "--wait")
	if code != cli.ExitBlocked || !strings.Contains(out, "CRASHED") || !strings.Contains(out, "--revert-crashed") {
		t.Fatalf("a crashed actor must block the node: exit %d", code)
	}
	if _, code := atetest.Run(t, ctx, "roll", "next-node", crashed, "--revert-crashed", "--wait"); code != 0 {
		t.Fatalf("--revert-crashed: exit %d", code)
	}
	// Traffic may have moved an actor onto the deleted pod's worker just
	// before it went: revert whatever else crashed, so the roll can go on.
	if _, code := atetest.Run(t, ctx, "revert", "--all-crashed", "--yes"); code != 0 {
		t.Fatalf("revert --all-crashed: exit %d", code)
	}
}

// TestUnregisteredWorkerPodHoldsTheFlip puts a worker pod of a serving
// pool on the last node that the syncer does not register (yet): it could
// be handed an actor at any moment, so within --register-timeout the node
// must not flip, nor the pod be deleted (test/e2e/ate/unregistered takes
// the timeout's way).
func TestUnregisteredWorkerPodHoldsTheFlip(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	if lastNode == "" {
		t.Fatal("needs TestCrashedActorBlocksTheNode")
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "late-worker", Namespace: "ate-workers",
		Labels:      map[string]string{fleet.PoolLabel: "python-small"},
		Annotations: map[string]string{"sim.rollbook.dev/register-delay": "1h"}},
		Spec: corev1.PodSpec{NodeName: lastNode, Containers: []corev1.Container{{Name: "ateom", Image: "registry.example/ateom"}}}}
	pods := c.Client.CoreV1().Pods("ate-workers")
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The run waits for the pod; it is stopped (as a person would) well
	// inside its --register-timeout.
	runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, code := atetest.Run(t, runCtx, "roll", "next-node", lastNode, "--wait", "--register-timeout", "1h")
	cancel()
	if code == 0 {
		t.Fatal("the run finished with an unregistered worker pod on the node")
	}
	if got := atetest.NodeLabels(t, ctx)[lastNode]; got != atetest.OldV {
		t.Fatalf("%s flipped to %s with an unregistered worker pod on it", lastNode, got)
	}
	if got, err := pods.Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Fatalf("the unregistered pod was deleted within --register-timeout: %v", err)
	}
	if n, err := c.Client.CoreV1().Nodes().Get(ctx, lastNode, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("%s cordoned while its pod may still register: %v", lastNode, err)
	}
	// It registers now; TestFullRollFinishes drains it with the others and
	// deletes it once the node is at NEW, as any old-pool pod.
	patch := []byte(`{"metadata":{"annotations":{"sim.rollbook.dev/register-delay":null}}}`)
	if _, err := pods.Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestFullRollFinishes(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	last := lastNode
	if last == "" {
		t.Fatal("needs TestCrashedActorBlocksTheNode")
	}

	// The last node, interrupted right after each kind of mutation and
	// resumed each time: the label flips exactly once.
	for _, reason := range []string{"WorkerDrained", "ActorSuspended", "SubstrateVersionFlipped", "Deleted"} {
		runCtx, cancel := cancelOnEvent(t, ctx, reason)
		_, code := atetest.Run(t, runCtx, "roll", "next-node", last, "--wait")
		cancel()
		if code != 0 && code != cli.ExitFailed {
			t.Fatalf("interrupted at %s: exit %d", reason, code)
		}
	}
	if _, code := atetest.Run(t, ctx, "roll", "next-node", "--all", "--wait"); code != 0 {
		t.Fatalf("--all: exit %d", code)
	}
	evs, err := c.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx,
		metav1.ListOptions{FieldSelector: "reason=SubstrateVersionFlipped,involvedObject.name=" + last})
	if err != nil || len(evs.Items) != 1 {
		t.Fatalf("%s was flipped %d times across the interrupted runs (%v); want once", last, len(evs.Items), err)
	}
	s := atetest.Status(t, ctx)
	if s.Counts[atetest.NewV] != 3 || s.OldPoolPodsRunning != 0 || s.ActorsOnOldPools != 0 {
		t.Fatalf("after the roll: %+v", s)
	}
}

// crashActorOn deletes the worker pod of a RUNNING actor on one of nodes
// and waits for the eviction window to crash the actor; it returns the
// node. Traffic wakes actors every few seconds; resuming a suspended one
// speeds that up.
func crashActorOn(t *testing.T, ctx context.Context, nodes ...string) string {
	t.Helper()
	c := simtest.Get(t)
	cl := atetest.Client(t, ctx)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		inv, err := cl.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var victim *ateapi.Actor
		for i, a := range inv.Actors {
			if a.State == ateapi.ActorRunning && a.Pod != "" && slices.Contains(nodes, a.Node) {
				victim = &inv.Actors[i]
				break
			}
		}
		if victim == nil {
			for _, a := range inv.Actors {
				if a.State == ateapi.ActorSuspended {
					_, _, _ = cl.ResumeActor(ctx, a.Atespace, a.Name)
					break
				}
			}
			time.Sleep(500 * time.Millisecond)
			continue
		}
		ns := "ate-workers"
		for _, w := range inv.Workers {
			if w.Name == victim.Worker {
				ns = w.Namespace
			}
		}
		err = c.Client.CoreV1().Pods(ns).Delete(ctx, victim.Pod, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			continue // the inventory lagged behind the pods
		}
		if err != nil {
			t.Fatal(err)
		}
		for wait := time.Now().Add(20 * time.Second); time.Now().Before(wait); time.Sleep(500 * time.Millisecond) {
			if a, err := cl.GetActor(ctx, victim.Atespace, victim.Name); err == nil && a.State == ateapi.ActorCrashed {
				return victim.Node
			}
			// The inventory may have been stale: whoever was on the pod crashed.
			if inv, err := cl.Inventory(ctx); err == nil {
				for _, a := range inv.Actors {
					if a.State == ateapi.ActorCrashed && slices.Contains(nodes, a.Node) {
						return a.Node
					}
				}
			}
		}
	}
	t.Fatalf("could not crash an actor on %v", nodes)
	return ""
}

// cancelOnEvent returns a context cancelled as soon as an Event with reason
// is written: the run stops right after that mutation.
func cancelOnEvent(t *testing.T, ctx context.Context, reason string) (context.Context, context.CancelFunc) {
	t.Helper()
	c := simtest.Get(t)
	l, err := c.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Client.CoreV1().Events(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{
		FieldSelector: "reason=" + reason, ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	go func() {
		defer w.Stop()
		select {
		case <-w.ResultChan():
			cancel()
		case <-runCtx.Done():
		}
	}()
	return runCtx, cancel
}
