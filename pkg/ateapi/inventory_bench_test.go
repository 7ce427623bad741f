package ateapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/pkg/atestate"
)

// BenchmarkInventory reads a fleet-sized inventory (5,000 workers, 50,000
// actors) the way `kubectl ate status` does; the server is in-process, so
// the figure includes its encoding too. Target for the whole status: 1.5 s.
func BenchmarkInventory(b *testing.B) {
	const workers, actors = 5000, 50000
	h := startFake(b, fakesubstrate.Options{PageSize: 1000, EncodeCache: true})
	for i := range workers {
		if err := h.srv.AddWorker(fakesubstrate.Worker{Name: fmt.Sprintf("w-%05d", i), Namespace: "ate-batch", Pool: "batch",
			Node: fmt.Sprintf("node-%d", i), Capacity: actors/workers + 1}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range actors {
		a := fakesubstrate.Actor{Atespace: fmt.Sprintf("team-%d", i%20), Name: fmt.Sprintf("actor-%06d", i),
			State: atestate.ActorRunning, Worker: fmt.Sprintf("w-%05d", i%workers)}
		if err := h.srv.AddActor(a); err != nil {
			b.Fatal(err)
		}
	}
	h.srv.PrimeEncodeCache() // measure the client, not the fake's dynamic encoding
	c, err := Dial(context.Background(), h.options())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		inv, err := c.Inventory(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if len(inv.Actors) != actors || len(inv.Workers) != workers {
			b.Fatalf("got %d actors, %d workers", len(inv.Actors), len(inv.Workers))
		}
	}
}
