//go:build e2e

package fullroll

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/cutoff"
	"github.com/rollbook/rollbook/internal/recordtest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// A pin the server applied while the run was being interrupted is still
// recorded: the re-run finds the pool pinned and has nothing left to say.
func TestPinInterruptedMidRequestIsStillRecorded(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	pools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers")
	p := pool("pin-interrupted", nil, 0)
	if _, err := pools.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pools.Delete(context.Background(), p.GetName(), metav1.DeleteOptions{}) }()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	cut, err := dynamic.NewForConfig(cutoff.Config(c.RESTConfig,
		cutoff.Method(http.MethodPatch, "/workerpools/"+p.GetName()), stop))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordtest.Recorder{}
	rb := roll.PinPoolsRunbook(c.Client, cut, atetest.Client(t, ctx), rec)
	res := runbook.Run(runCtx, rb, []runbook.Target{runbook.ScopeTarget{Scope: "pools"}}, runbook.Options{RunID: "pin-test"})
	if res.Outcome == runbook.OutcomeDone {
		t.Fatalf("the run was interrupted mid-pin but reports %s", res.Outcome)
	}
	got, err := pools.Get(ctx, p.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pin, _, _ := unstructured.NestedString(got.Object, "spec", "template", "nodeSelector", fleet.VersionLabel); pin != atetest.OldV {
		t.Fatalf("the server did not apply the pin (pin %q)", pin)
	}
	if n := rec.Count("PoolPinned"); n != 1 {
		t.Fatalf("%d PoolPinned records for a pin the server applied, want 1: %q", n, rec.All())
	}
}

// placedAfterRead is the substrate as a pin sees it when an actor is
// placed on the pool's worker right after the run's first read: every
// read shows the pool's one worker, every later read the actor on it. (The
// pool runs no pod: a Running one would make its deletion at the end an
// edit of a serving pool.) It notes whether the worker was drained before
// the first read that shows the actor.
type placedAfterRead struct {
	*ateapi.Client
	pool               string // namespace/name
	reads              int
	drained, checkedOn bool
}

func (p *placedAfterRead) Inventory(ctx context.Context) (*ateapi.Inventory, error) {
	inv, err := p.Client.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(p.pool, "/")
	w := ateapi.Worker{Name: "pin-race-worker", Namespace: ns, Pool: name, Pod: name + "-0", Node: "kwok-node-0",
		State: ateapi.WorkerActive}
	if p.drained {
		w.State = ateapi.WorkerDraining
	}
	inv.Workers = append(inv.Workers, w)
	if p.reads++; p.reads > 1 {
		p.checkedOn = p.checkedOn || p.drained
		inv.Actors = append(inv.Actors, ateapi.Actor{Atespace: "team-race", Name: "placed-meanwhile",
			State: ateapi.ActorRunning, Worker: w.Name, Node: w.Node})
	}
	return inv, nil
}

func (p *placedAfterRead) DrainWorker(ctx context.Context, name string) (ateapi.Worker, error) {
	if name == "pin-race-worker" {
		p.drained = true
		return ateapi.Worker{Name: name, State: ateapi.WorkerDraining}, nil
	}
	return p.Client.DrainWorker(ctx, name)
}

// An actor placed on an unpinned pool's worker between the run's check
// and its patch is not rolled through: the pool's workers are drained
// first (no actor is placed on them after that), the check is made again,
// and the pool is left unpinned, the run blocked, naming the actor.
func TestPinRefusesAnActorPlacedBetweenTheCheckAndThePatch(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	pools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers")
	p := pool("pin-race", nil, 0)
	if _, err := pools.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pools.Delete(context.Background(), p.GetName(), metav1.DeleteOptions{}) }()
	api := &placedAfterRead{Client: atetest.Client(t, ctx), pool: "ate-workers/pin-race"}
	rec := &recordtest.Recorder{}
	res := runbook.Run(ctx, roll.PinPoolsRunbook(c.Client, atetest.Dynamic(t), api, rec), []runbook.Target{runbook.ScopeTarget{Scope: "pools"}},
		runbook.Options{RunID: "pin-race"})
	got, err := pools.Get(ctx, p.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pin, _, _ := unstructured.NestedString(got.Object, "spec", "template", "nodeSelector", fleet.VersionLabel); pin != "" {
		t.Fatalf("the pool was pinned (%q) with an actor placed on its worker since the check", pin)
	}
	if all := fmt.Sprintf("%+v", res); res.Outcome != runbook.OutcomeBlocked || !strings.Contains(all, "placed-meanwhile") {
		t.Fatalf("want the run blocked naming the actor: %s", all)
	}
	if !api.checkedOn {
		t.Fatal("the check after the race was not made on drained workers: an actor could still be placed before the patch")
	}
}
