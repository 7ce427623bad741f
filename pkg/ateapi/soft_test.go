package ateapi

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// A soft server pages at 2 whatever the client asks; a quiet list still
// returns every item. The server's clock is the test's: the items are quiet
// because the clock moved past the soft window, not because the test slept.
func TestSoftListsReturnQuietItems(t *testing.T) {
	var clock atomic.Int64 // the server's now, in Unix nanoseconds
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	h := startFake(t, fakesubstrate.Options{SoftLists: true, SoftWindow: time.Second, Now: now})
	for i := range 5 {
		if err := h.srv.AddWorker(fakesubstrate.Worker{Name: fmt.Sprintf("w%d", i), Node: "n"}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(int64(1100 * time.Millisecond))
	c, err := h.dial(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.ListWorkers(context.Background())
	if err != nil || len(ws) != 5 {
		t.Fatalf("listed %d workers (%v), want 5", len(ws), err)
	}
}
