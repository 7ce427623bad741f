//go:build e2e

// Package eviction runs the fleet with an ateom that exits soon after
// SIGTERM (ROLLBOOK_SIM_ATE_ATEOM_EXIT): a worker pod deleted with an awake
// actor loses it within seconds of the deletion request, whether or not the
// pod object is gone. The whole roll deletes worker pods and loses no actor;
// deleting a worker pod under an awake actor, as a roll without the guard
// would, is recorded as actor-lost, timed from the pod's deletionTimestamp.
package eviction

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

const ateomExit = 2 * time.Second

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_ATEOM_EXIT", ateomExit.String())
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

func TestTheRollDeletesNoWorkerPodUnderAnAwakeActor(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 12*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	atetest.AllAt(t, ctx, atetest.NewV, "after the roll")
	atetest.NoActorLost(t, ctx)
}

// TestAnAwakeActorIsLostWhenItsAteomExits deletes the pod of a worker
// hosting a RUNNING actor, behind a finalizer so the pod object stays: the
// actor is lost once the ateom exits (ateomExit after the deletion request),
// not once the object is gone.
func TestAnAwakeActorIsLostWhenItsAteomExits(t *testing.T) {
	c := simtest.Get(t)
	lost := c.ExpectViolation(t, "actor-lost")
	ctx := simtest.Context(t, 3*time.Minute)
	cl := atetest.Client(t, ctx)
	// The fleet's traffic may suspend the victim inside the window (which
	// saves it) and resume it elsewhere: then the deletion proves nothing,
	// and another awake actor is taken.
	var (
		victim    ateapi.Actor
		w         ateapi.Worker
		a         ateapi.Actor
		requested time.Time
	)
	for attempt := 0; attempt < 5; attempt++ {
		victim, w, a, requested = deleteUnderAwakeActor(t, ctx, c, cl)
		if a.State == ateapi.ActorCrashed || a.Worker == w.Name {
			break
		}
		t.Logf("actor %s left worker %s (now %s on %q) before its ateom exited: taking another", victim.Ref(), w.Name, a.State, a.Worker)
	}
	pods := c.Client.CoreV1().Pods(w.Namespace)
	crashedAt := time.Now()
	if a.State != ateapi.ActorCrashed {
		t.Fatalf("actor %s is %s %s after its worker pod's deletion (ateom exits after %s): want CRASHED", victim.Ref(),
			a.State, time.Since(requested), ateomExit)
	}
	if d := crashedAt.Sub(requested); d < ateomExit-time.Second || d > ateomExit+15*time.Second {
		t.Fatalf("actor %s CRASHED %s after the deletion request; its ateom exits %s after SIGTERM", victim.Ref(), d, ateomExit)
	}
	if _, err := pods.Get(ctx, w.Pod, metav1.GetOptions{}); err != nil {
		t.Fatalf("the finalizer should still hold pod %s/%s: %v", w.Namespace, w.Pod, err)
	}
	t.Logf("actor %s CRASHED %s after the deletion request: %s", victim.Ref(), crashedAt.Sub(requested), a.CrashMessage)
	lost()
}

// deleteUnderAwakeActor deletes, behind a finalizer, the pod of an ACTIVE
// worker hosting a RUNNING actor and watches that actor until it is CRASHED
// or off that worker, or ateomExit + 30 s passed since the deletion request.
func deleteUnderAwakeActor(t *testing.T, ctx context.Context, c *simtest.Cluster, cl *ateapi.Client) (
	victim ateapi.Actor, w ateapi.Worker, a ateapi.Actor, requested time.Time) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); victim.Name == "" && time.Now().Before(deadline); {
		inv, err := cl.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range inv.Actors {
			if a.State == ateapi.ActorRunning && a.Worker != "" {
				for _, x := range inv.Workers {
					if x.Name == a.Worker && x.State == ateapi.WorkerActive {
						victim, w = a, x
					}
				}
			}
		}
		if victim.Name == "" {
			for _, a := range inv.Actors {
				if a.State == ateapi.ActorSuspended {
					_, _, _ = cl.ResumeActor(ctx, a.Atespace, a.Name)
					break
				}
			}
			time.Sleep(time.Second)
		}
	}
	if victim.Name == "" {
		t.Fatal("no RUNNING actor on an ACTIVE worker")
	}
	pods := c.Client.CoreV1().Pods(w.Namespace)
	hold, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/hold"}}})
	if _, err := pods.Patch(ctx, w.Pod, types.MergePatchType, hold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pods.Patch(context.Background(), w.Pod, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`),
			metav1.PatchOptions{})
	})
	if err := pods.Delete(ctx, w.Pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.Get(ctx, w.Pod, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pod %s/%s not Terminating: %v", w.Namespace, w.Pod, err)
	}
	requested = p.DeletionTimestamp.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
	for deadline := requested.Add(ateomExit + 30*time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if a, err = cl.GetActor(ctx, victim.Atespace, victim.Name); err != nil {
			t.Fatal(err)
		}
		if a.State == ateapi.ActorCrashed || a.Worker != w.Name {
			break
		}
	}
	return victim, w, a, requested
}
