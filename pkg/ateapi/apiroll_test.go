package ateapi

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// One Client across API servers of every era in turn (the runbook's step 6
// and its rollback): each call after a roll builds and reads with the new
// server's descriptors, so the model stays the one every era agrees on.
func TestOneClientAcrossAPIRolls(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{Era: fakesubstrate.EraC})
	seedFleet(t, h.srv)
	c := h.mustDial(t, func(o *DialOptions) {
		// The roll's downtime is longer than a fast retry's budget alone.
		o.Client.Retry.ReconnectWait = 2 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inv, err := c.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := view(inv, fakesubstrate.EraC)
	// No roll, no new connection: the descriptors of the dial serve on (one
	// DrainWorker probe, the dial's).
	if _, err := c.ListWorkers(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.srv.Calls("DrainWorker"); n != 1 {
		t.Errorf("%d DrainWorker calls before any roll, want the dial's probe alone", n)
	}
	for _, era := range []fakesubstrate.Era{fakesubstrate.EraD, fakesubstrate.EraC, fakesubstrate.EraD} {
		if err := h.srv.Roll(era, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		inv, err := c.Inventory(ctx)
		if err != nil {
			t.Fatalf("after the roll to era %s: %v", era, err)
		}
		if got := c.Capabilities().Era; got != wantEra[era] {
			t.Errorf("after the roll to era %s the client says era %s", era, got)
		}
		if got := view(inv, era); !slices.Equal(got, want) {
			t.Errorf("after the roll to era %s:\n got %q\nwant %q", era, got, want)
		}
		a, err := c.GetActor(ctx, "team", "running")
		if err != nil || a.Worker != "uid-a" {
			t.Errorf("GetActor after the roll to era %s: %+v, %v", era, a, err)
		}
	}
}

// An API server rolled between GetWorker and the era D assignments list
// that completes it (the runbook's step 6, mid-node): the get starts again
// on the new server's descriptors instead of failing the node because the
// new server lacks ListWorkerActorAssignments.
func TestGetWorkerAcrossARollBetweenItsCalls(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{Era: fakesubstrate.EraD})
	seedFleet(t, h.srv)
	c := h.mustDial(t, func(o *DialOptions) { o.Client.Retry.ReconnectWait = 2 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The assignments list is held in the server until the roll cuts it.
	h.srv.SetLatency("ListWorkerActorAssignments", time.Minute)
	rolled := make(chan error, 1)
	go func() {
		for h.srv.Calls("ListWorkerActorAssignments") == 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		rolled <- h.srv.Roll(fakesubstrate.EraC, 200*time.Millisecond)
	}()
	w, err := c.GetWorker(ctx, "uid-a")
	if err != nil || w.Name != "uid-a" {
		t.Fatalf("GetWorker across the roll: %+v, %v", w, err)
	}
	if err := <-rolled; err != nil {
		t.Fatal(err)
	}
	if got := c.Capabilities().Era; got != wantEra[fakesubstrate.EraC] {
		t.Errorf("after the roll the client says era %s", got)
	}
}
