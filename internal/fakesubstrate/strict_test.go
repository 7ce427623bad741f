package fakesubstrate

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollbook/rollbook/pkg/atestate"
	"github.com/rollbook/rollbook/pkg/protopath"
)

func TestTransitionsTakeTime(t *testing.T) {
	changed := make(chan struct{}, 4)
	s, _ := start(t, Options{TransitionTime: 50 * time.Millisecond, OnChange: func() { changed <- struct{}{} }})
	if err := s.AddWorker(Worker{Name: "w1", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddActor(Actor{Atespace: "a", Name: "x"}); err != nil {
		t.Fatal(err)
	}
	a, ok, err := s.ResumeActor("a", "x")
	if err != nil || !ok || a.State != atestate.ActorResuming || a.Worker != "w1" {
		t.Fatalf("resume: %+v %v %v; want RESUMING on w1", a, ok, err)
	}
	if _, err := s.SuspendActor("a", "x"); err == nil {
		t.Fatal("suspend of a RESUMING actor must be refused (FailedPrecondition)")
	}
	<-changed
	if a, _ := s.GetActor("a", "x"); a.State != atestate.ActorRunning {
		t.Fatalf("after the transition: %s, want RUNNING", a.State)
	}
	if a, err := s.SuspendActor("a", "x"); err != nil || a.State != atestate.ActorSuspending || a.Worker != "w1" {
		t.Fatalf("suspend: %+v %v; want SUSPENDING, still on w1", a, err)
	}
	if a, err := s.SuspendActor("a", "x"); err != nil || a.State != atestate.ActorSuspending {
		t.Fatalf("suspend again while SUSPENDING: %+v %v", a, err)
	}
	<-changed
	if a, _ := s.GetActor("a", "x"); a.State != atestate.ActorSuspended || a.Worker != "" {
		t.Fatalf("after the transition: %+v, want SUSPENDED and unbound", a)
	}
}

func TestFlipLosesPausedActors(t *testing.T) {
	var (
		mu   sync.Mutex
		lost []string
	)
	s, _ := start(t, Options{OnLost: func(r ActorRef, why string) {
		mu.Lock()
		defer mu.Unlock()
		lost = append(lost, r.Atespace+"/"+r.Name+": "+why)
	}})
	for _, a := range []Actor{
		{Atespace: "a", Name: "paused-here", State: atestate.ActorPaused, SnapshotNodes: []string{"n1"}},
		{Atespace: "a", Name: "paused-there", State: atestate.ActorPaused, SnapshotNodes: []string{"n2"}},
		{Atespace: "a", Name: "suspended", State: atestate.ActorSuspended},
	} {
		if err := s.AddActor(a); err != nil {
			t.Fatal(err)
		}
	}
	got := s.LoseLocalSnapshots("n1")
	if len(got) != 1 || got[0].Name != "paused-here" {
		t.Fatalf("lost %v, want only a/paused-here", got)
	}
	if a, _ := s.GetActor("a", "paused-here"); a.State != atestate.ActorCrashed || a.CrashMessage == "" {
		t.Fatalf("paused-here: %+v", a)
	}
	if a, _ := s.GetActor("a", "paused-there"); a.State != atestate.ActorPaused {
		t.Fatalf("paused-there: %s", a.State)
	}
	if len(lost) != 1 {
		t.Fatalf("OnLost told %v", lost)
	}
}

func TestSoftListsMissChangingItems(t *testing.T) {
	s, _ := start(t, Options{SoftLists: true, SoftPageSize: 1})
	for _, n := range []string{"a", "b", "c"} {
		if err := s.AddActor(Actor{Atespace: "x", Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	start := s.seq
	if err := s.SetActorState("x", "c", atestate.ActorPaused); err != nil {
		t.Fatal(err)
	}
	a := s.actors["x/c"]
	if !s.missed(a.seq, a.changed, start) {
		t.Fatal("an actor changed after the list began must be missed")
	}
	b := s.actors["x/b"]
	if s.missed(b.seq, b.changed, start) {
		t.Fatal("an unchanged actor must be listed")
	}
}

// An era D worker whose ateom has not reported its capacity is handed no
// actor; once it reports, it hosts as many as its capacity.
func TestCapacityReportedLaterAndMultiActorWorkers(t *testing.T) {
	s, _ := start(t, Options{Era: EraD})
	if err := s.AddWorker(Worker{Name: "w1", Node: "n1", Capacity: 2, CapacityPending: true}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x", "y", "z"} {
		if err := s.AddActor(Actor{Atespace: "a", Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.ResumeActor("a", "x"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("resume onto a worker with no capacity reported: %v, want ResourceExhausted", err)
	}
	if err := s.ReportCapacity("w1"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x", "y"} {
		if a, ok, err := s.ResumeActor("a", n); err != nil || !ok || a.Worker != "w1" {
			t.Fatalf("resume %s: %+v %v %v, want it on w1", n, a, ok, err)
		}
	}
	if _, _, err := s.ResumeActor("a", "z"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third actor on a worker of capacity 2: %v, want ResourceExhausted", err)
	}
}

// With SyncSuspend a SuspendActor call answers once the actor is SUSPENDED,
// as upstream's does, so it lasts the transition.
func TestSyncSuspendAnswersOnceSuspended(t *testing.T) {
	const d = 200 * time.Millisecond
	s, conn := start(t, Options{Era: EraC, TransitionTime: d, SyncSuspend: true})
	if err := s.AddWorker(Worker{Name: "w1", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddActor(Actor{Atespace: "a", Name: "x", State: atestate.ActorRunning, Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	req := request(t, EraC, "SuspendActor")
	protopath.Set(req, "actor.atespace", "a")
	protopath.Set(req, "actor.name", "x")
	start := time.Now()
	if _, err := call(t, s, conn, "SuspendActor", req); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("SuspendActor answered after %s, before the %s transition ended", took, d)
	}
	if a, _ := s.GetActor("a", "x"); a.State != atestate.ActorSuspended {
		t.Fatalf("after the call: %s, want SUSPENDED", a.State)
	}
}
