//go:build e2e

package verbs

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

// A canary roll soaks after its first node; a health failure injected
// during the soak (one of the canary's new workers drained, as a wrongly
// aimed DrainWorker does) pauses the roll with the reason, and the pause
// holds for the next run. recover-node then gives the canary a fresh worker.
func TestCanarySoakPausesOnHealthFailure(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	inGKEPool(t, ctx) // so that the status check below could see GKE text
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	cl := atetest.Client(t, ctx)

	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runTo(t, ctx, &out, c.Kubeconfig, "roll", "next-node", "--all", "--wait", "--canary", "1", "--soak", "40s")
	}()
	for {
		text, more := out.next()
		if strings.Contains(text, "Soak") {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("the roll ended (exit %d) before its soak:\n%s", code, out.String())
		case <-ctx.Done():
			t.Fatalf("no soak started:\n%s", out.String())
		case <-more:
		}
	}
	var canary string // the node the canary roll moved
	for n, v := range atetest.NodeLabels(t, ctx) {
		if v == atetest.NewV {
			canary = n
		}
	}
	// The canary's verify may pass before the scheduler has placed the new
	// pools' pending pods there (0 of 0 is a valid verify: placement is the
	// scheduler's); the 40 s soak leaves time for them to register.
	var victim ateapi.Worker
	for deadline := time.Now().Add(30 * time.Second); victim.Name == ""; time.Sleep(300 * time.Millisecond) {
		inv, err := cl.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range inv.WorkersOnNode(canary) {
			if w.State == ateapi.WorkerActive {
				victim = w
			}
		}
		if victim.Name == "" && time.Now().After(deadline) {
			t.Fatalf("no ACTIVE worker on the canary node %q to drain within 30 s of the soak's start", canary)
		}
	}
	if _, err := cl.DrainWorker(ctx, victim.Name); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatal("the roll did not stop")
	}
	t.Logf("kubectl ate roll next-node --all --wait --canary 1 --soak 40s → exit %d\n%s", code, out.String())
	reason := "worker " + victim.Name + " of " + victim.PoolKey() + " is DRAINING"
	if code != 0 || !strings.Contains(out.String(), "paused the roll") || !strings.Contains(out.String(), reason) {
		t.Fatalf("a failed soak must pause the roll (exit 0) and name the reason %q: exit %d", reason, code)
	}
	moved := func() int {
		n := 0
		for _, v := range atetest.NodeLabels(t, ctx) {
			if v == atetest.NewV {
				n++
			}
		}
		return n
	}
	if m := moved(); m != 1 {
		t.Fatalf("%d node(s) at %s after the canary paused; want 1", m, atetest.NewV)
	}
	// The pause holds for the next run until someone resumes.
	again := atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	if !strings.Contains(again, "paused") || moved() != 1 {
		t.Fatalf("a run after the failed soak must honour the pause; %d node(s) moved", moved())
	}
	if out, _ := runGKE(t, ctx, "status"); strings.Contains(out, "After the roll, on GKE") {
		t.Errorf("status printed the after-roll commands with nodes still at OLD")
	}
	atetest.MustRun(t, ctx, "resume")
	atetest.MustRun(t, ctx, "recover-node", canary)
	// Its pod is gone (the worker itself leaves the list once the eviction
	// window ends), and every other worker on the canary is ACTIVE.
	p, err := c.Client.CoreV1().Pods(victim.Namespace).Get(ctx, victim.Pod, metav1.GetOptions{})
	if err == nil && string(p.UID) == victim.Name && p.DeletionTimestamp == nil {
		t.Errorf("the drained canary worker's pod %s/%s survived recover-node", victim.Namespace, victim.Pod)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	inv := settled(t, ctx, cl)
	for _, w := range inv.WorkersOnNode(canary) {
		if w.Name != victim.Name && w.State != ateapi.WorkerActive {
			t.Errorf("worker %s (%s) on the canary is %s after recover-node", w.Name, w.PoolKey(), w.State)
		}
	}
	atetest.NoActorLost(t, ctx)
}
