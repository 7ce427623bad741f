package nodeagent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// whileFlashing runs f once tt-flash writes root's chips (polled, not
// timed), and returns the flash's result.
func whileFlashing(t *testing.T, root string, flash func() nodeagent.Result, f func()) nodeagent.Result {
	t.Helper()
	res := make(chan nodeagent.Result, 1)
	go func() { res <- flash() }()
	for !fakehost.FlashWriting(root) {
		select {
		case r := <-res:
			t.Fatalf("the flash ended before tt-flash wrote anything: %+v", r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	f()
	return <-res
}

// Asked to stop (SIGTERM) while tt-flash writes the chips, the agent lets
// it finish writing and resetting them, starts nothing more, and says so:
// every chip runs the new bundle and none is half-written.
func TestAStopMidFlashFinishesTheChipsBeingWritten(t *testing.T) {
	a, root := flashHost(t, fakehost.Spec{Devices: devices("18.2.0.0", "18.2.0.0"), FlashDelay: time.Second})
	stop := make(chan struct{})
	a.Stop = stop
	o := flashOpts(t, "19.9.0")
	r := whileFlashing(t, root, func() nodeagent.Result { return a.Flash(context.Background(), o) }, func() { close(stop) })
	requireFailure(t, r, nodeagent.ReasonStopped)
	assert.Contains(t, r.Error.Message, "finished tt-flash writing the chips first")
	assert.Contains(t, r.Error.Message, "skipped readback-after")
	require.NoError(t, fakehost.CheckInterruptedFlash(root))
	evs, err := fakehost.Events(root, 0)
	require.NoError(t, err)
	assert.Empty(t, evs, "a chip was left half-written")
	assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, observe(t, root).Firmware)
	assert.Len(t, callsTo(t, root, "tt-flash"), 1)
}

// The situation the stop guards against, produced: a flash cut short (its
// context cancelled, as SIGTERM did before, or SIGKILL) leaves the chips
// half-written, and the host says so.
func TestAFlashCutShortLeavesHalfWrittenChips(t *testing.T) {
	a, root := flashHost(t, fakehost.Spec{Devices: devices("18.2.0.0", "18.2.0.0"), FlashDelay: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	o := flashOpts(t, "19.9.0")
	whileFlashing(t, root, func() nodeagent.Result { return a.Flash(ctx, o) }, cancel)
	require.NoError(t, fakehost.CheckInterruptedFlash(root))
	evs, err := fakehost.Events(root, 0)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, fakehost.EventFlashInterrupted, evs[0].Kind)
}

// Asked to stop before anything changes the device (fetching the bundle),
// the agent stops at once and writes nothing.
func TestAStopBeforeTheFlashWritesNothing(t *testing.T) {
	a, root := flashHost(t, fakehost.Spec{Devices: devices("18.2.0.0", "18.2.0.0")})
	stop := make(chan struct{})
	close(stop)
	a.Stop = stop
	r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
	requireFailure(t, r, nodeagent.ReasonStopped)
	assert.Contains(t, r.Error.Message, "nothing was changing the device")
	assert.Empty(t, callsTo(t, root, "tt-flash"))
	assert.Equal(t, []string{"18.2.0.0", "18.2.0.0"}, observe(t, root).Firmware)
}

// Asked to stop during the module swap, the agent finishes it (insmod
// after rmmod: the node is never left without a driver) and skips the rest.
func TestAStopDuringTheModuleSwapFinishesIt(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "2.0.0", KernelHeaders: true, CachedKMD: []string{"2.0.0", "2.1.0"},
		LoadDelay: time.Second})
	stop := make(chan struct{})
	a.Stop = stop
	o := vouch(t, nodeagent.KMDOptions{Version: "2.1.0", GitURL: "file:///mirror/tt-kmd.git"})
	res := make(chan nodeagent.Result, 1)
	go func() { res <- a.KMD(context.Background(), o) }()
	for !swapping(t, root) {
		select {
		case r := <-res:
			t.Fatalf("the swap ended before the test saw it: %+v", r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(stop)
	r := <-res
	requireFailure(t, r, nodeagent.ReasonStopped)
	assert.Contains(t, r.Error.Message, "finished the module swap first")
	assert.Equal(t, "2.1.0", observe(t, root).LoadedKMD, "the node was left without the new driver")
}

// swapping: rmmod ran and insmod has not yet loaded the new module.
func swapping(t *testing.T, root string) bool {
	t.Helper()
	calls, err := fakehost.Calls(root)
	require.NoError(t, err)
	for _, c := range calls {
		if c[0] == "insmod" {
			return true
		}
	}
	return false
}
