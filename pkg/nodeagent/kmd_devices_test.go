package nodeagent_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The new module loads but its probe of one card fails: the node fails
// naming the card, and the previous module is back, serving both cards.
func TestKMDVerifyCountsDevices(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, CachedKMD: []string{"1.31.0"}})
	require.NoError(t, fakehost.FailProbe(root, 0, "2.0.0"))
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonDevicesUnbound)
	for _, want := range []string{"bound 1 of 2", "not bound: " + fakehost.BusID(0), "restored tt-kmd 1.31.0 (2 of 2",
		"back in service on tt-kmd 1.31.0"} {
		assert.Contains(t, r.Error.Message, want)
	}
	assert.Equal(t, "1.31.0", r.Restored)
	assert.Equal(t, "1.31.0", r.After)
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
	assert.False(t, r.Persisted, "a module that failed its verify is not made boot-persistent")
	assert.Contains(t, toolNames(t, root), "rmmod")
}

// The previous module no longer serves the card either (it broke during
// the swap): the restore is not verified, and says so.
func TestKMDVerifyDevicesRestoreFails(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, CachedKMD: []string{"1.31.0"}})
	require.NoError(t, fakehost.FailProbe(root, 1, "2.0.0", "1.31.0"))
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonDevicesUnbound)
	assert.Contains(t, r.Error.Message, "restoring tt-kmd 1.31.0 failed")
	assert.Contains(t, r.Error.Message, fakehost.BusID(1))
	assert.Empty(t, r.Restored)
}

// A first install (nothing loaded before) has nothing to restore.
func TestKMDVerifyDevicesFirstInstall(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{KernelHeaders: true})
	require.NoError(t, fakehost.FailProbe(root, 1, "2.0.0"))
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonDevicesUnbound)
	assert.Contains(t, r.Error.Message, "no previous module to restore")
	assert.Equal(t, "2.0.0", observe(t, root).LoadedKMD)
}

// tt-kmd >= 2.10 keeps the device busy through a dma-buf or a mapping
// after close(): those processes are holders, named as such, and killed by
// --force-unload; nothing blames the helper's hostPID.
func TestKMDHoldersAfterClose(t *testing.T) {
	spec := fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, Holders: []fakehost.Holder{
		{PID: pidA, Comm: "ttnn", PodUID: podA, ContainerID: cidA, Via: fakehost.HoldDmaBuf},
		{PID: pidC, Comm: "pytest", Via: fakehost.HoldMmap},
	}}
	a, root := newHost(t, spec)
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonDeviceInUse)
	assert.Equal(t, []nodeagent.Holder{
		{PID: pidA, Comm: "ttnn", Via: nodeagent.HeldByDmaBuf, PodUID: podA, ContainerID: cidA},
		{PID: pidC, Comm: "pytest", Via: nodeagent.HeldByMmap},
	}, r.Holders)
	assert.Contains(t, r.Error.Message, "through an mmap after close")

	r = a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0", ForceUnload: true}))
	requireSuccess(t, r)
	assert.NotContains(t, r.Warnings, "hostPID")
	assert.Equal(t, []int{1}, observe(t, root).PIDs)
	kills := callsTo(t, root, "kill")
	require.Len(t, kills, 1)
	assert.Equal(t, []string{"kill", "-KILL", strconv.Itoa(pidA), strconv.Itoa(pidC)}, kills[0])
}

// A dma-buf another exporter made (a GPU's) is not a holder of ours.
func TestForeignDmaBufIsNotAHolder(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0"})
	require.NoError(t, fakehost.StartProcess(root, fakehost.Holder{PID: pidB, Via: fakehost.HoldDmaBuf}))
	require.NoError(t, fakehost.SetDmaBufExporter(root, pidB, "amdgpu"))
	r := a.Probe(context.Background(), nodeagent.ProbeOptions{})
	requireSuccess(t, r)
	assert.Empty(t, r.Holders)
}

// A card whose firmware does not answer keeps its /dev node (tt-kmd
// registers it although its hardware init failed) but is not served: the
// probe says which, and a swap onto such a card fails and puts the
// previous module back. A module older than tt-kmd's telemetry (1.28)
// exposes nothing to ask, so its cards count as before.
func TestServedMeansAnswering(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, CachedKMD: []string{"1.31.0"}})
	require.NoError(t, fakehost.SetSilent(root, 1, true))
	r := a.Probe(context.Background(), nodeagent.ProbeOptions{})
	requireSuccess(t, r)
	require.NotNil(t, r.Probe.PCIDevices)
	assert.Equal(t, 2, *r.Probe.PCIDevices)
	assert.Equal(t, 1, r.Probe.BoundDevices)
	assert.Equal(t, []int{1}, r.Probe.SilentDevices)

	r = a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonDevicesUnbound)
	for _, want := range []string{"bound 1 of 2", "/dev/tenstorrent/1 do not answer", "restored tt-kmd 1.31.0"} {
		assert.Contains(t, r.Error.Message, want)
	}
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)

	require.NoError(t, fakehost.SetSilent(root, 1, false))
	r = a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)

	old, oldRoot := newHost(t, fakehost.Spec{LoadedKMD: "1.27.0"})
	require.NoError(t, fakehost.SetSilent(oldRoot, -1, true))
	r = old.Probe(context.Background(), nodeagent.ProbeOptions{})
	requireSuccess(t, r)
	assert.Equal(t, 2, r.Probe.BoundDevices, "tt-kmd 1.27 has no telemetry to ask")
	assert.Empty(t, r.Probe.SilentDevices)
}

// A Galaxy's probe (32 chips) fits its termination message whole: every
// chip's firmware reaches kubectl tt, which refuses a chip's case before
// the cordon (a record listing each PCI function did not fit, and the
// firmware was dropped to make room).
func TestGalaxyProbeFitsWithEveryChip(t *testing.T) {
	devs := make([]fakehost.Device, 32)
	for i := range devs {
		devs[i] = fakehost.Device{Firmware: "18.2.0.0", Board: "tt-galaxy-wh", SubsystemDevice: fakehost.GalaxyWormholeSubsystem}
	}
	a, _ := newHost(t, fakehost.Spec{LoadedKMD: "2.7.0", KernelHeaders: true, Devices: devs})
	r := a.Probe(context.Background(), nodeagent.ProbeOptions{KMDVersion: "2.8.0"})
	requireSuccess(t, r)
	b, err := nodeagent.EncodeResult(r)
	require.NoError(t, err)
	back, err := nodeagent.ParseResult(b)
	require.NoError(t, err)
	t.Logf("a Galaxy's probe result: %d of %d bytes", len(b), nodeagent.MaxTerminationMessageBytes)
	assert.False(t, back.Truncated, "the probe of a Galaxy was cut to fit (%d bytes)", len(b))
	assert.Len(t, back.Devices, 32)
	assert.Equal(t, map[string]int{"0x401e": 32}, back.Probe.PCIChips)
}
