package ateapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// A soft server pages at 2 whatever the client asks; a quiet list still
// returns every item.
func TestSoftListsReturnQuietItems(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{SoftLists: true, SoftWindow: time.Second})
	for i := range 5 {
		if err := h.srv.AddWorker(fakesubstrate.Worker{Name: fmt.Sprintf("w%d", i), Node: "n"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	c, err := h.dial(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.ListWorkers(context.Background())
	if err != nil || len(ws) != 5 {
		t.Fatalf("listed %d workers (%v), want 5", len(ws), err)
	}
}
