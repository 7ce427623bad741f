package ateapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

var wantEra = map[fakesubstrate.Era]Era{
	fakesubstrate.EraB2: EraB, fakesubstrate.EraC: EraC, fakesubstrate.EraCStub: EraC, fakesubstrate.EraD: EraD,
}

// view is what every era must agree on once Resolve has linked things.
func view(inv *Inventory, era fakesubstrate.Era) []string {
	var out []string
	for _, w := range inv.Workers {
		out = append(out, fmt.Sprintf("worker %s pod=%s pool=%s node=%s ns=%s ips=%v class=%s labels=%v state=%s actors=%v free=%v",
			w.Name, w.Pod, w.Pool, w.Node, w.Namespace, w.IPs, w.SandboxClass, w.Labels, w.State, w.Actors, w.Free()))
	}
	for _, a := range inv.Actors {
		node := a.Node
		if era == fakesubstrate.EraB2 && a.State == ActorCrashed {
			node = "n2" // era B has no assigned_node: a crashed actor's pin is unknowable
		}
		out = append(out, fmt.Sprintf("actor %s uid=%s state=%s worker=%s pool=%s pod=%s node=%s snap=%v",
			a.Ref(), a.UID, a.State, a.Worker, a.Pool, a.Pod, node, a.SnapshotNodes))
	}
	slices.Sort(out)
	return out
}

func TestEveryEraYieldsTheSameModel(t *testing.T) {
	var first []string
	for _, era := range fakesubstrate.Eras() {
		t.Run(string(era), func(t *testing.T) {
			h := startFake(t, fakesubstrate.Options{Era: era})
			seedFleet(t, h.srv)
			c := h.mustDial(t, nil)
			if got := c.Capabilities().Era; got != wantEra[era] {
				t.Errorf("era = %s, want %s", got, wantEra[era])
			}
			inv, err := c.Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := view(inv, era)
			if first == nil {
				first = got
				want := []string{
					"actor other/crashed uid=uid-other-crashed state=CRASHED worker= pool= pod= node=n2 snap=[]",
					"actor team/paused uid=uid-team-paused state=PAUSED worker= pool= pod= node= snap=[n1]",
					"actor team/running uid=uid-team-running state=RUNNING worker=uid-a pool=counter pod=counter-a node=n1 snap=[]",
					"actor team/suspended uid=uid-team-suspended state=SUSPENDED worker= pool= pod= node= snap=[]",
					"worker uid-a pod=counter-a pool=counter node=n1 ns=ns ips=[10.0.0.1] class=gvisor labels=map[app:counter] " +
						"state=ACTIVE actors=[team/running] free=false",
					"worker uid-b pod=counter-b pool=counter node=n1 ns=ns ips=[10.0.0.2] class=gvisor labels=map[app:counter] " +
						"state=ACTIVE actors=[] free=true",
					"worker uid-c pod=counter-v2-c pool=counter-v2 node=n2 ns=ns ips=[10.0.0.3] class=gvisor labels=map[app:counter] " +
						"state=ACTIVE actors=[] free=true",
				}
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("model:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			} else if strings.Join(got, "\n") != strings.Join(first, "\n") {
				t.Fatalf("era %s model differs:\n%s\nfirst era:\n%s", era, strings.Join(got, "\n"), strings.Join(first, "\n"))
			}
			residents := inv.ActorsOnNode("n1")
			var names []string
			for _, a := range residents {
				names = append(names, a.Name)
			}
			if !slices.Equal(names, []string{"paused", "running"}) {
				t.Errorf("residents of n1 = %v", names)
			}
		})
	}
}

func TestDrainWorkerByEra(t *testing.T) {
	ctx := context.Background()
	for _, era := range fakesubstrate.Eras() {
		t.Run(string(era), func(t *testing.T) {
			h := startFake(t, fakesubstrate.Options{Era: era})
			seedFleet(t, h.srv)
			c := h.mustDial(t, nil)
			caps := c.Capabilities()
			w, err := c.DrainWorker(ctx, "uid-a")
			switch era {
			case fakesubstrate.EraB2, fakesubstrate.EraCStub:
				if caps.DrainImplemented {
					t.Error("DrainImplemented = true")
				}
				if !errors.Is(err, ErrUnimplemented) || !strings.Contains(err.Error(), "fresh install") {
					t.Fatalf("err = %v, want unimplemented + fresh install", err)
				}
				var e *Error
				if !errors.As(err, &e) || e.Missing != (era == fakesubstrate.EraB2) {
					t.Errorf("Missing = %v for %s", e.Missing, era)
				}
				return
			}
			if !caps.DrainImplemented || err != nil {
				t.Fatalf("drain: implemented=%v err=%v", caps.DrainImplemented, err)
			}
			if w.State != WorkerDraining || w.Version != 2 {
				t.Fatalf("drained worker = %+v", w)
			}
			again, err := c.DrainWorker(ctx, "uid-a")
			if err != nil || again.Version != 2 {
				t.Fatalf("second drain bumped version or failed: %+v %v", again, err)
			}
			if got, _ := h.srv.GetActor("team", "running"); got.Worker != "uid-a" {
				t.Error("drain touched the assignment")
			}
			if _, err := c.DrainWorker(ctx, "nope"); !errors.Is(err, ErrNotFound) {
				t.Errorf("drain absent = %v", err)
			}
			gw, err := c.GetWorker(ctx, "uid-a")
			if err != nil || gw.State != WorkerDraining || len(gw.Actors) != 1 {
				t.Errorf("GetWorker = %+v, %v", gw, err)
			}
		})
	}
}

func TestActorLifecycleByEra(t *testing.T) {
	ctx := context.Background()
	for _, era := range fakesubstrate.Eras() {
		t.Run(string(era), func(t *testing.T) {
			h := startFake(t, fakesubstrate.Options{Era: era})
			seedFleet(t, h.srv)
			c := h.mustDial(t, nil)

			a, err := c.SuspendActor(ctx, "team", "running")
			if err != nil || a.State != ActorSuspended || a.Worker != "" || a.ExternalSnapshotURI == "" {
				t.Fatalf("suspend running = %+v, %v", a, err)
			}
			if a, err = c.SuspendActor(ctx, "team", "suspended"); err != nil || a.State != ActorSuspended {
				t.Fatalf("suspend suspended = %+v, %v", a, err)
			}
			_, err = c.SuspendActor(ctx, "other", "crashed")
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrFailedPrecondition) || e.ActorState != ActorCrashed ||
				!strings.Contains(err.Error(), "CRASHED") {
				t.Fatalf("suspend crashed = %v", err)
			}
			if _, err := c.GetActor(ctx, "team", "ghost"); !errors.Is(err, ErrNotFound) {
				t.Errorf("get ghost = %v", err)
			}

			a, resumed, err := c.ResumeActor(ctx, "team", "suspended")
			if err != nil || !resumed || a.State != ActorRunning || a.Worker == "" {
				t.Fatalf("resume = %+v %v %v", a, resumed, err)
			}
			if _, resumed, err = c.ResumeActor(ctx, "team", "suspended"); err != nil || resumed {
				t.Errorf("resume running again: resumed=%v err=%v", resumed, err)
			}

			if era == fakesubstrate.EraB2 {
				if _, err := c.RevertActor(ctx, "other", "crashed"); !errors.Is(err, ErrUnimplemented) {
					t.Errorf("revert in B2 = %v", err)
				}
				return
			}
			if a, err = c.RevertActor(ctx, "other", "crashed"); err != nil || a.State != ActorSuspended || a.CrashMessage != "" {
				t.Fatalf("revert crashed = %+v %v", a, err)
			}
			_, err = c.RevertActor(ctx, "other", "crashed")
			if !errors.As(err, &e) || e.ActorState != ActorSuspended || !strings.Contains(err.Error(), "SUSPENDED") {
				t.Fatalf("revert suspended = %v", err)
			}
		})
	}
}
