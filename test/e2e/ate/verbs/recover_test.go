//go:build e2e

package verbs

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	atenode "github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// activeByPool counts the ACTIVE workers of each pool.
func activeByPool(inv *ateapi.Inventory) map[string]int {
	out := map[string]int{}
	for _, w := range inv.Workers {
		if w.State == ateapi.WorkerActive {
			out[w.PoolKey()]++
		}
	}
	return out
}

// The runbook's "drained the wrong node": there is no undrain, so
// recover-node empties the drained workers, deletes their pods and waits
// for fresh ACTIVE workers; no actor is lost and the sim's monitor, which
// would flag a pinned worker pod deleted on its own version's node, sees
// the run declare the recovery on its Lease.
func TestRecoverWronglyDrainedNode(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	cl := atetest.Client(t, ctx)
	const node = "kwok-node-1"
	inv := settled(t, ctx, cl)
	before := activeByPool(inv)
	drained := map[types.UID]string{}
	for _, w := range inv.WorkersOnNode(node) {
		if _, err := cl.DrainWorker(ctx, w.Name); err != nil {
			t.Fatal(err)
		}
		drained[types.UID(w.Name)] = w.Namespace + "/" + w.Pod
	}
	if len(drained) == 0 {
		t.Fatalf("no worker on %s to drain", node)
	}
	livePods := func() map[types.UID]string {
		pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
		if err != nil {
			t.Fatal(err)
		}
		out := map[types.UID]string{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				out[p.UID] = p.Namespace + "/" + p.Name
			}
		}
		return out
	}

	out, code := atetest.Run(t, ctx, "recover-node", node, "--dry-run")
	if code != 0 || !strings.Contains(out, "delete pod/") {
		t.Fatalf("recover-node --dry-run: exit %d", code)
	}
	out, code = atetest.Run(t, ctx, "recover-node", node, "--dry-run", "-o", "json")
	var res runbook.Result
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&res); code != 0 || err != nil || res.Runbook != atenode.RecoverRunbookName ||
		res.Outcome != runbook.OutcomePlanned || len(res.Targets) != 1 {
		t.Fatalf("recover-node --dry-run -o json: exit %d, %v, %s %s", code, err, res.Runbook, res.Outcome)
	}
	pods := livePods()
	for uid, name := range drained {
		if _, ok := pods[uid]; !ok {
			t.Fatalf("the dry run deleted %s", name)
		}
	}

	start := time.Now()
	atetest.MustRun(t, ctx, "recover-node", node)
	took := time.Since(start)
	pods = livePods()
	for uid, name := range drained {
		if _, ok := pods[uid]; ok {
			t.Errorf("drained worker pod %s survived the recovery", name)
		}
	}
	inv = settled(t, ctx, cl)
	for _, w := range inv.Workers {
		if _, live := pods[types.UID(w.Name)]; live && w.State != ateapi.WorkerActive {
			t.Errorf("worker %s (%s, pod %s on %s) is %s after the recovery", w.Name, w.PoolKey(), w.Pod, w.Node, w.State)
		}
	}
	if after := activeByPool(inv); len(after) != len(before) {
		t.Errorf("ACTIVE workers per pool: %v before the drain, %v after the recovery", before, after)
	} else {
		for pool, n := range before {
			if after[pool] != n {
				t.Errorf("pool %s: %d ACTIVE worker(s) before the drain, %d after the recovery", pool, n, after[pool])
			}
		}
	}
	atetest.NoActorLost(t, ctx)

	// Nothing left to do: the same command is a no-op, and the Lease no
	// longer declares the recovery.
	out = atetest.MustRun(t, ctx, "recover-node", node)
	if strings.Contains(out, "Deleted") || strings.Contains(out, "ActorSuspended") {
		t.Errorf("a second recover-node changed something")
	}
	l, err := c.Client.CoordinationV1().Leases(fleet.Namespace).Get(ctx, fleet.LockName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := l.Annotations[atenode.AnnRecoveringNode]; ok {
		t.Errorf("the Lease still declares a recovery: %q", v)
	}
	t.Logf("recover-node replaced %d drained worker(s) on %s in %s", len(drained), node, took.Round(time.Millisecond))
}
