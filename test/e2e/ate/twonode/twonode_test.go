//go:build e2e

// Package twonode rolls a two-node ate-fleet with traffic off, so the free
// workers of each pool lineage can be counted exactly: the capacity guard
// before the second node, a full roll and a full rollback.
package twonode

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_TRAFFIC", "off")
	simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet"})
}

// freeCloneWorkers are the free new-pool workers on node.
func freeCloneWorkers(t *testing.T, ctx context.Context, cl *ateapi.Client, node string) []ateapi.Worker {
	t.Helper()
	inv, err := cl.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []ateapi.Worker
	for _, w := range inv.Workers {
		if w.Node == node && strings.HasSuffix(w.Pool, "-v0-3-0") && w.Free() {
			out = append(out, w)
		}
	}
	return out
}

// TestCapacityGuard drains the new pools' free workers by hand, as a wrong
// drain would, and recovers as the runbook says: deleting those empty pods.
// The sim flags deleting a worker pod on a node of its own version, so the
// test expects exactly that.
func TestCapacityGuard(t *testing.T) {
	c := simtest.Get(t)
	deleted := c.ExpectViolation(t, "old-pool-pod-deleted-before-flip")
	defer deleted()
	ctx := simtest.Context(t, 6*time.Minute)
	cl := atetest.Client(t, ctx)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node")
	if got := atetest.NodeLabels(t, ctx)["kwok-node-0"]; got != atetest.NewV {
		t.Fatalf("kwok-node-0 at %s", got)
	}
	// kwok-node-1 still hosts demo/chat-2; the only workers elsewhere are
	// the new pools' on kwok-node-0. Take them out of service, as a wrong
	// drain would: the actors of kwok-node-1 would have nowhere to go.
	var drained []ateapi.Worker
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		for _, w := range freeCloneWorkers(t, ctx, cl, "kwok-node-0") {
			if _, err := cl.DrainWorker(ctx, w.Name); err != nil {
				t.Fatal(err)
			}
			drained = append(drained, w)
		}
		if len(drained) > 0 && len(freeCloneWorkers(t, ctx, cl, "kwok-node-0")) == 0 {
			break
		}
	}
	// Every worker of kwok-node-0 drained with no move recorded: it serves
	// nothing, so moving kwok-node-1 would take a second node out. Status
	// and the refusal name the way out.
	atetest.ExpectRefused(t, ctx, "kubectl ate recover-node kwok-node-0", "roll", "next-node")
	atetest.ExpectRefused(t, ctx, "serves nothing new", "roll", "next-node", "--wait", "--wait-timeout", "5s")
	if s := atetest.Status(t, ctx); len(s.Drained) != 1 || s.Drained[0].Node != "kwok-node-0" ||
		!strings.HasPrefix(s.Next, "kubectl ate recover-node kwok-node-0") {
		t.Errorf("status should name kwok-node-0 drained and recover-node first: %+v, next %q", s.Drained, s.Next)
	}

	// Recover as the runbook says for a wrong drain: delete the drained,
	// empty pods; their replacements register as fresh workers, and --wait
	// sees them — once a node at NEW has room for them. The other clones'
	// Pending pods are older, and the scheduler serves the oldest first, so
	// the freed room is not the replacements'. Keep kwok-node-0 full first:
	// the wait must name the pods it waits on and why they are not placed.
	setCPU(t, ctx, c, "kwok-node-0", cpuKept(t, ctx, c, "kwok-node-0", drained))
	for _, w := range drained {
		if err := c.Client.CoreV1().Pods(w.Namespace).Delete(ctx, w.Pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The drained pods going, kwok-node-0 no longer stands drained; its
	// replacements are not placed yet, so the capacity guard refuses.
	out := atetest.ExpectRefused(t, ctx, "not enough free actor slots on ACTIVE workers", "roll", "next-node")
	if !strings.Contains(out, "ate-workers/python-small or its clone: 1 actor(s) to suspend, 0 free") {
		t.Errorf("the refusal must say, per lineage, how many workers are needed and how many exist")
	}
	out = atetest.ExpectRefused(t, ctx, "not enough free workers", "roll", "next-node", "--wait", "--wait-timeout", "8s")
	if !strings.Contains(out, "pod(s) of pool ate-workers/python-small-v0-3-0 not scheduled (0/2 nodes are available") ||
		!strings.Contains(out, "Insufficient cpu") {
		t.Errorf("the wait must name the lineage's unscheduled pods and the scheduler's reason")
	}
	// Make room for every pool's and clone's pods (3 × 2 workers), as the wait says.
	setCPU(t, ctx, c, "kwok-node-0", 8)
	// The sim records a deletion once its pod is gone: watch each go, then
	// give its monitor the moment it takes to write, so the next test starts
	// from a quiet violations file. That moment is kept as a sleep: whether
	// a deletion counts depends on whether the ReplicaSet's replacement was
	// already seen, so no condition names every line to wait for.
	for _, w := range drained {
		if err := kube.WaitForPodGone(ctx, c.Client, w.Namespace, w.Pod); err != nil {
			t.Fatalf("drained pod %s/%s: %v", w.Namespace, w.Pod, err)
		}
	}
	time.Sleep(2 * time.Second)
}

func TestRollAndRollbackAfterTheRecovery(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	if s := atetest.Status(t, ctx); s.Counts[atetest.NewV] != 2 || s.ActorsOnOldPools != 0 {
		t.Fatalf("after the roll: %s %v", s.Phase, s.Counts)
	}

	// Rollback, in the runbook's order: the control plane first.
	atetest.ExpectRefused(t, ctx, "deploy apiserver", "rollback")
	out := atetest.MustRun(t, ctx, "rollback", "--control-plane-reverted", "--wait")
	if j, k := strings.Index(out, "deploy ate-system"), strings.Index(out, "deploy ate-controller"); j < 0 || j > k {
		t.Errorf("rollback must print deploy ate-system, then deploy ate-controller")
	}
	s := atetest.Status(t, ctx)
	if s.Phase != campaign.PhaseNotStarted || len(s.Nodes) != 0 || s.Counts[atetest.OldV] != 2 {
		t.Fatalf("after the rollback: %s (%s), in progress %v", s.Phase, s.Summary, s.Nodes)
	}
	if out := atetest.MustRun(t, ctx, "rollback"); !strings.Contains(out, "one atelet DaemonSet, at "+atetest.OldV) {
		t.Errorf("the re-run must check for a third atelet DaemonSet")
	}
	atetest.NoActorLost(t, ctx)
}

// cpuKept is the cpu the pods on node request, the drained ones left out.
func cpuKept(t *testing.T, ctx context.Context, c *simtest.Cluster, node string, drained []ateapi.Worker) int64 {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	gone := map[string]bool{}
	for _, w := range drained {
		gone[w.Namespace+"/"+w.Pod] = true
	}
	var milli int64
	for _, p := range pods.Items {
		if gone[p.Namespace+"/"+p.Name] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ct := range p.Spec.Containers {
			milli += ct.Resources.Requests.Cpu().MilliValue()
		}
	}
	return (milli + 999) / 1000
}

// setCPU gives node cpus of allocatable cpu: room for that many workers.
func setCPU(t *testing.T, ctx context.Context, c *simtest.Cluster, node string, cpus int64) {
	t.Helper()
	patch := fmt.Sprintf(`{"status":{"allocatable":{"cpu":"%d"},"capacity":{"cpu":"%d"}}}`, cpus, cpus)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{},
		"status"); err != nil {
		t.Fatal(err)
	}
}
