package nodeagent_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// flashOpts returns options for version with a local bundle and no reset
// settle delay.
func flashOpts(t *testing.T, version string) nodeagent.FlashOptions {
	t.Helper()
	bundle := filepath.Join(t.TempDir(), "fw_pack-"+version+".fwbundle")
	require.NoError(t, fakehost.WriteBundle(bundle, version))
	return nodeagent.FlashOptions{Version: version, BundleURL: "file://" + bundle, Homogenize: true, ResetSettle: time.Millisecond}
}

func devices(fws ...string) []fakehost.Device {
	out := make([]fakehost.Device, len(fws))
	for i, fw := range fws {
		out[i] = fakehost.Device{Firmware: fw}
	}
	return out
}

func flashHost(t *testing.T, spec fakehost.Spec) (*nodeagent.Agent, string) {
	if spec.LoadedKMD == "" {
		spec.LoadedKMD = "2.0.0"
	}
	return newHost(t, spec)
}

func TestFlashSkipsOrForces(t *testing.T) {
	tests := []struct {
		name       string
		fw         []string
		version    string
		homogenize bool
		forceWrite bool
		allowMajor bool
		wantFlash  bool
		wantForce  bool
		wantReason nodeagent.Reason // "" = success
		wantFW     []string
	}{
		{name: "already at version", fw: []string{"19.9.0.0", "19.9.0.0"}, version: "19.9.0", homogenize: true,
			wantFW: []string{"19.9.0.0", "19.9.0.0"}},
		{name: "force-write re-flashes", fw: []string{"19.9.0.0", "19.9.0.0"}, version: "19.9.0", homogenize: true, forceWrite: true,
			wantFlash: true, wantForce: true, wantFW: []string{"19.9.0.0", "19.9.0.0"}},
		{name: "upgrade uniform chips", fw: []string{"18.2.0.0", "18.2.0.0"}, version: "19.9.0", homogenize: true,
			wantFlash: true, wantFW: []string{"19.9.0.0", "19.9.0.0"}},
		{name: "chips disagree: --force", fw: []string{"19.9.0.0", "19.2.0.0"}, version: "19.5.0", homogenize: true,
			wantFlash: true, wantForce: true, wantFW: []string{"19.5.0.0", "19.5.0.0"}},
		// Without --homogenize the newer chip is still a downgrade: --force.
		{name: "chips disagree without homogenize: the newer chip's downgrade forces", fw: []string{"19.9.0.0", "19.2.0.0"},
			version: "19.5.0", wantFlash: true, wantForce: true, wantFW: []string{"19.5.0.0", "19.5.0.0"}},
		{name: "chips disagree without homogenize, none newer", fw: []string{"19.5.0.0", "19.2.0.0"}, version: "19.5.0",
			wantFlash: true, wantFW: []string{"19.5.0.0", "19.5.0.0"}},
		// Disagreeing chips none above the bundle: tt-flash writes the one
		// behind and skips the one at it; --force would be one it does not need.
		{name: "chips disagree, none newer: no --force even with homogenize", fw: []string{"19.5.0.0", "19.2.0.0"},
			version: "19.5.0", homogenize: true, wantFlash: true, wantFW: []string{"19.5.0.0", "19.5.0.0"}},
		// tt-flash writes nothing for a downgrade without --force (the SPI
		// holds a newer bundle), so the agent passes it.
		{name: "minor downgrade: --force", fw: []string{"19.9.0.0", "19.9.0.0"}, version: "19.5.0",
			wantFlash: true, wantForce: true, wantFW: []string{"19.5.0.0", "19.5.0.0"}},
		// tt-flash refuses a major downgrade even with --force; the agent
		// refuses first, naming the case, and runs nothing.
		{name: "major downgrade is refused even with --force", fw: []string{"19.9.0.0", "19.9.0.0"}, version: "18.5.0",
			forceWrite: true, wantReason: nodeagent.ReasonMajorDowngrade, wantFW: []string{"19.9.0.0", "19.9.0.0"}},
		// Bundles before the renumbering at 18 are 80.<major>.<minor>.<patch>;
		// tt-flash normalises them first: 80.17 → 18 is a one-major upgrade.
		{name: "80.x scheme: 80.17 → 18 is an upgrade", fw: []string{"80.17.2.0", "80.17.2.0"}, version: "18.2.0",
			wantFlash: true, wantFW: []string{"18.2.0.0", "18.2.0.0"}},
		// tt-flash's fwId check refuses more than one major without --force,
		// and a chip with no running version (Galaxy's 0xffffffff) too:
		// --force also skips its board checks, so only --force-write passes it.
		{name: "two majors up: refused without --force-write", fw: []string{"80.17.2.0", "80.17.2.0"}, version: "19.0.0",
			wantReason: nodeagent.ReasonNeedsForce, wantFW: []string{"80.17.2.0", "80.17.2.0"}},
		{name: "two majors up with --force-write", fw: []string{"80.17.2.0", "80.17.2.0"}, version: "19.0.0", forceWrite: true,
			wantFlash: true, wantForce: true, wantFW: []string{"19.0.0.0", "19.0.0.0"}},
		{name: "Galaxy's 0xffffffff: refused without --force-write", fw: []string{"255.255.255.255", "19.0.0.0"}, version: "19.9.0",
			wantReason: nodeagent.ReasonNeedsForce, wantFW: []string{"255.255.255.255", "19.0.0.0"}},
		{name: "Galaxy's 0xffffffff with --force-write", fw: []string{"255.255.255.255", "19.0.0.0"}, version: "19.9.0",
			forceWrite: true, wantFlash: true, wantForce: true, wantFW: []string{"19.9.0.0", "19.9.0.0"}},
		{name: "80.x at the target's major: no --force", fw: []string{"80.18.2.0", "18.0.0.0"}, version: "18.5.0",
			wantFlash: true, wantFW: []string{"18.5.0.0", "18.5.0.0"}},
		{name: "major downgrade allowed", fw: []string{"19.9.0.0", "19.9.0.0"}, version: "18.5.0", allowMajor: true,
			wantFlash: true, wantForce: true, wantFW: []string{"18.5.0.0", "18.5.0.0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, root := flashHost(t, fakehost.Spec{Devices: devices(tc.fw...)})
			o := flashOpts(t, tc.version)
			o.Homogenize, o.ForceWrite, o.AllowMajorDowngrade = tc.homogenize, tc.forceWrite, tc.allowMajor
			r := a.Flash(context.Background(), o)
			if tc.wantReason == "" {
				requireSuccess(t, r)
			} else {
				requireFailure(t, r, tc.wantReason)
			}
			flashes := callsTo(t, root, "tt-flash")
			if !tc.wantFlash {
				assert.Empty(t, flashes)
				assert.False(t, r.Changed)
			} else {
				require.Len(t, flashes, 1)
				assert.Equal(t, tc.wantForce, slices.Contains(flashes[0], "--force"), "argv %v", flashes[0])
				assert.Equal(t, tc.allowMajor, slices.Contains(flashes[0], "--allow-major-downgrades"), "argv %v", flashes[0])
				assert.Equal(t, []string{"tt-flash", "--no-color", "flash", "--fw-tar"}, flashes[0][:4])
			}
			assert.Equal(t, tc.wantFW, observe(t, root).Firmware)
			require.Len(t, r.Devices, len(tc.fw))
			assert.Equal(t, tc.fw[0], r.Devices[0].Before)
		})
	}
}

func TestFlashHealsReadbackWithTheRightReset(t *testing.T) {
	tests := []struct {
		name      string
		subsystem string
		wantReset []string
	}{
		{"PCIe card", "", []string{"tt-smi", "-r"}},
		{"Wormhole Galaxy", fakehost.GalaxyWormholeSubsystem, []string{"tt-smi", "-glx_reset"}},
		{"Blackhole Galaxy", fakehost.GalaxyBlackholeSubsystem, []string{"tt-smi", "-glx_reset"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			devs := []fakehost.Device{{SubsystemDevice: tc.subsystem}, {SubsystemDevice: tc.subsystem}}
			a, root := flashHost(t, fakehost.Spec{Devices: devs, Wedged: true})
			r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
			requireSuccess(t, r)
			var resets [][]string
			for _, c := range callsTo(t, root, "tt-smi") {
				if c[1] != "-s" {
					resets = append(resets, c)
				}
			}
			assert.Equal(t, [][]string{tc.wantReset}, resets, "exactly one heal")
			assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, observe(t, root).Firmware)
		})
	}
}

func TestFlashReadbackStillFailing(t *testing.T) {
	spec := fakehost.Spec{Wedged: true, ResetsToHeal: 2}
	t.Run("stops before flashing", func(t *testing.T) {
		a, root := flashHost(t, spec)
		r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		requireFailure(t, r, nodeagent.ReasonReadbackFailed)
		assert.Empty(t, callsTo(t, root, "tt-flash"))
		assert.Contains(t, r.OutputTail, "Error in detecting devices")
	})
	t.Run("continue-on-readback-failure flashes blind", func(t *testing.T) {
		a, root := flashHost(t, spec)
		o := flashOpts(t, "19.9.0")
		o.ContinueOnReadbackFailure = true
		r := a.Flash(context.Background(), o)
		requireFailure(t, r, nodeagent.ReasonFlashFailed)
		assert.Len(t, callsTo(t, root, "tt-flash"), 1)
		assert.NotEmpty(t, r.Warnings)
	})
}

func TestFlashFallsBackToSysfsWhenTTSMIBroken(t *testing.T) {
	a, _ := flashHost(t, fakehost.Spec{SMISnapshotBroken: true})
	r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
	requireSuccess(t, r)
	require.Len(t, r.Devices, 2)
	assert.Equal(t, "18.2.0.0", r.Devices[0].Before)
	assert.Equal(t, "19.9.0.0", r.Devices[1].After)
	assert.NotEmpty(t, r.Warnings)
}

func TestFlashFailures(t *testing.T) {
	t.Run("one device fails to flash", func(t *testing.T) {
		a, _ := flashHost(t, fakehost.Spec{Devices: []fakehost.Device{{}, {FailFlash: true}}})
		r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		requireFailure(t, r, nodeagent.ReasonFlashFailed)
		require.Len(t, r.Devices, 2)
		// tt-flash wrote chip 0's SPI but skips every reset when a chip
		// fails: chip 0 still runs the old image.
		assert.False(t, r.Devices[0].OK)
		assert.Equal(t, "18.2.0.0", r.Devices[0].After)
		assert.False(t, r.Devices[1].OK)
		assert.Equal(t, "18.2.0.0", r.Devices[1].After)
		assert.Contains(t, r.Error.Message, "device 1 (0000:02:00.0)")
		assert.Contains(t, r.OutputTail, "FLASH FAILED")
	})
	t.Run("an SPI write tt-flash hands to a person", func(t *testing.T) {
		a, root := flashHost(t, fakehost.Spec{Devices: []fakehost.Device{{}, {SPIVerifyFails: true}, {}}})
		r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		requireFailure(t, r, nodeagent.ReasonFlashNeedsPerson)
		assert.Contains(t, r.Error.Message, "contact Tenstorrent support")
		for _, st := range r.Steps {
			assert.NotEqual(t, "reset-to-load", st.Name, "a board with a failed chip must not be reset")
		}
		o, err := fakehost.Inspect(root)
		require.NoError(t, err)
		// The siblings hold the bundle in their SPI, unloaded: no reset.
		assert.Equal(t, []string{"18.2.0.0", "18.2.0.0", "18.2.0.0"}, o.Firmware)
		assert.Equal(t, []string{"19.9.0.0", "18.2.0.0", "19.9.0.0"}, o.SPI)
	})
	t.Run("a card silent after the flash's reset", func(t *testing.T) {
		a, root := flashHost(t, fakehost.Spec{Devices: []fakehost.Device{{}, {BootsSilent: true}}})
		r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		requireFailure(t, r, nodeagent.ReasonDeviceSilent)
		assert.Contains(t, r.Error.Message, "device 1 ("+fakehost.BusID(1)+") does not answer")
		assert.Contains(t, r.Error.Message, "Power the host off and on")
		assert.NotContains(t, r.Error.Message, "device 0", "the card that answers is not named")
		// Both SPIs hold the bundle: a power cycle, not a re-flash, is what is left.
		assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, observe(t, root).SPI)
		// The re-run before the power cycle says the same, and writes nothing.
		again := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		requireFailure(t, again, nodeagent.ReasonDeviceSilent)
		assert.Contains(t, again.Error.Message, "device 1 ("+fakehost.BusID(1)+") does not answer")
		assert.False(t, again.Changed, "nothing written")
		// After it, the card runs what tt-flash wrote: done with no write.
		require.NoError(t, fakehost.SetBootsSilent(root, 1, false))
		after := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		require.True(t, after.Success, "%+v", after.Error)
		assert.False(t, after.Changed, "no second write")
	})
	t.Run("config space reset on exit 0", func(t *testing.T) {
		a, root := flashHost(t, fakehost.Spec{ConfigSpaceResetBug: true})
		r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		requireFailure(t, r, nodeagent.ReasonConfigSpaceReset)
		assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, observe(t, root).Firmware, "versions alone would have passed")
	})
	t.Run("driver not loaded", func(t *testing.T) {
		root := t.TempDir()
		require.NoError(t, fakehost.Create(root, fakehost.Spec{}))
		a := &nodeagent.Agent{Root: root, Env: []string{fakehost.RootEnv + "=" + root}, Log: testLog{t}}
		r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
		requireFailure(t, r, nodeagent.ReasonReadbackFailed)
		assert.Contains(t, r.OutputTail, "No Tenstorrent driver detected")
	})
	t.Run("slow flash hits the timeout", func(t *testing.T) {
		a, _ := flashHost(t, fakehost.Spec{FlashDelay: 5 * time.Second})
		o := flashOpts(t, "19.9.0")
		o.Timeout = 700 * time.Millisecond
		start := time.Now()
		r := a.Flash(context.Background(), o)
		requireFailure(t, r, nodeagent.ReasonTimeout)
		assert.Less(t, time.Since(start), 4*time.Second, "tt-flash must be killed at the deadline")
	})
	t.Run("bundle missing", func(t *testing.T) {
		a, root := flashHost(t, fakehost.Spec{})
		o := flashOpts(t, "19.9.0")
		o.BundleURL = "file:///nonexistent/fw.fwbundle"
		r := a.Flash(context.Background(), o)
		requireFailure(t, r, nodeagent.ReasonBundleFetchFailed)
		assert.Empty(t, callsTo(t, root, "tt-flash"))
	})
}

func TestFlashResultFitsWithHugeOutput(t *testing.T) {
	devs := make([]fakehost.Device, 32)
	devs[7].FailFlash = true
	a, _ := flashHost(t, fakehost.Spec{Devices: devs, FlashNoiseLines: 20000})
	a.Log = nil
	r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
	requireFailure(t, r, nodeagent.ReasonFlashFailed)
	assert.Greater(t, len(r.OutputTail), 4096)

	path := filepath.Join(t.TempDir(), "termination-log")
	require.NoError(t, nodeagent.WriteTerminationMessage(path, r))
	b := readFile(t, path)
	assert.LessOrEqual(t, len(b), nodeagent.MaxTerminationMessageBytes)
	back, err := nodeagent.ParseResult(b)
	require.NoError(t, err)
	assert.True(t, back.Truncated)
	assert.Equal(t, nodeagent.ReasonFlashFailed, back.Error.Reason)
	assert.Contains(t, back.OutputTail, "FLASH FAILED", "the end of the output is kept")
	failing := slices.IndexFunc(back.Devices, func(d nodeagent.Device) bool { return d.Index == 7 })
	require.GreaterOrEqual(t, failing, 0, "the failing device survives truncation")
	assert.False(t, back.Devices[failing].OK)
}

func TestFlashRefusesWhileTheDeviceIsHeld(t *testing.T) {
	spec := fakehost.Spec{Devices: devices("18.2.0.0", "18.2.0.0"), Holders: []fakehost.Holder{{PID: 4400001, Comm: "bench"}}}
	a, root := flashHost(t, spec)
	r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
	require.NotNil(t, r.Error)
	assert.Equal(t, nodeagent.ReasonDeviceInUse, r.Error.Reason)
	require.Len(t, r.Holders, 1)
	assert.Equal(t, 4400001, r.Holders[0].PID)
	assert.NotContains(t, toolNames(t, root), "tt-flash", "never flash under a holder")
	ev, err := fakehost.Events(root, 0)
	require.NoError(t, err)
	assert.Empty(t, ev)

	o := flashOpts(t, "19.9.0")
	o.ForceUnload = true
	r = a.Flash(context.Background(), o)
	requireSuccess(t, r)
	require.Len(t, r.Holders, 1)
	assert.True(t, r.Holders[0].Killed)
	assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, observe(t, root).Firmware)
	ev, err = fakehost.Events(root, 0)
	require.NoError(t, err)
	assert.Empty(t, ev, "the flash ran only after the holder was gone")
}

// A card flashed earlier but never reset has the bundle in its SPI and the
// old image running: tt-flash writes nothing and resets nothing (exit 0),
// so the agent resets once to load the SPI and then verifies.
func TestFlashResetsACardFlashedButNotReset(t *testing.T) {
	devs := devices("18.2.0.0", "18.2.0.0")
	devs[0].SPI, devs[1].SPI = "19.9.0.0", "19.9.0.0"
	a, root := flashHost(t, fakehost.Spec{Devices: devs})
	r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
	requireSuccess(t, r)
	assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, observe(t, root).Firmware)
	assert.Len(t, callsTo(t, root, "tt-flash"), 1)
	resets := 0
	for _, c := range callsTo(t, root, "tt-smi") {
		if slices.Contains(c, "-r") {
			resets++
		}
	}
	assert.Equal(t, 1, resets, "one reset after tt-flash loads the SPI")
	ops, err := fakehost.Ops(root)
	require.NoError(t, err)
	for _, op := range ops {
		assert.NotEqual(t, fakehost.OpFlash, op.Op, "nothing is written: the SPI already holds the bundle")
	}
}

// tt-flash killed after its SPI write, before its reset: the flash fails
// naming the case; the re-run writes nothing and converges by one reset.
func TestFlashKilledAfterTheWriteConvergesByReset(t *testing.T) {
	a, root := flashHost(t, fakehost.Spec{Devices: devices("18.2.0.0", "18.2.0.0")})
	require.NoError(t, fakehost.KillNextFlash(root))
	o := flashOpts(t, "19.9.0")
	r := a.Flash(context.Background(), o)
	requireFailure(t, r, nodeagent.ReasonFlashFailed)
	assert.Contains(t, r.Error.Message, "upgrade on 2 device(s)")
	h := observe(t, root)
	assert.Equal(t, []string{"18.2.0.0", "18.2.0.0"}, h.Firmware)
	assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, h.SPI)
	requireSuccess(t, a.Flash(context.Background(), o))
	assert.Equal(t, []string{"19.9.0.0", "19.9.0.0"}, observe(t, root).Firmware)
	ops, err := fakehost.Ops(root)
	require.NoError(t, err)
	writes := map[int]int{}
	for _, op := range ops {
		if op.Op == fakehost.OpFlash {
			writes[op.Chip]++
		}
	}
	assert.Equal(t, map[int]int{0: 1, 1: 1}, writes, "each chip written once")
}

// tt-smi lists an n300's remote chip (bus_id N/A) and prints N/A for what
// it cannot read; the agent's devices are the PCI ones sysfs lists, and an
// unreadable version is unknown, not a version.
func TestFlashCountsPCIChipsAndReadsNAAsUnknown(t *testing.T) {
	devs := []fakehost.Device{{Firmware: "18.2.0.0", Board: "n300"}, {Firmware: "18.2.0.0", Board: "n300"}}
	a, _ := flashHost(t, fakehost.Spec{Devices: devs})
	r := a.Flash(context.Background(), flashOpts(t, "19.9.0"))
	requireSuccess(t, r)
	require.Len(t, r.Devices, 2)

	out := []byte(`{"device_info": [{"board_info": {"bus_id": "0000:01:00.0", "board_type": "n300"}, "firmwares":
		{"fw_bundle_version": "N/A"}},
	 {"board_info": {"bus_id": "N/A", "board_type": "n300"}, "firmwares": {"fw_bundle_version": "19.9.0.0"}}]}`)
	got, err := nodeagent.ParseSMISnapshot(out)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "?", got[0].Version)
}
