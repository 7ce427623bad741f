package nodeagent_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

const kernel = fakehost.DefaultKernel

func TestKMDUpgradeThenDowngradeAndReupgradeHitTheCache(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, CachedKMD: []string{"1.31.0"}})
	ctx := context.Background()

	up := a.KMD(ctx, vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, up)
	assert.Equal(t, "1.31.0", up.Before)
	assert.Equal(t, "2.0.0", up.After)
	assert.True(t, up.Changed)
	assert.Equal(t, nodeagent.InstallModeContainer, up.InstallMode)
	assert.Equal(t, "2.0.0", observe(t, root).LoadedKMD)
	assert.Empty(t, callsTo(t, root, "git"), "the node builds nothing for its running kernel")
	assert.Empty(t, callsTo(t, root, "make"))
	two := fakehost.KernelObject("2.0.0", kernel)
	assert.Equal(t, two, readFile(t, filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0", hexSHA(two)[:16], "tenstorrent.ko")))

	one := fakehost.KernelObject("1.31.0", kernel)
	for _, c := range []struct {
		v  string
		ko []byte
	}{{"1.31.0", one}, {"2.0.0", two}} {
		r := a.KMD(ctx, vouch(t, nodeagent.KMDOptions{Version: c.v, ModuleSHA256: hexSHA(c.ko)}))
		requireSuccess(t, r)
		require.NotNil(t, r.CacheHit)
		assert.Equal(t, c.v, observe(t, root).LoadedKMD)
		if c.v == "2.0.0" {
			assert.Equal(t, "cache", r.Module.Source, "the vouched bytes are in the cache: no shared copy needed")
		}
	}
}

func TestKMDFastPathStillPersists(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "2.0.0", CachedKMD: []string{"2.0.0"}})
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	assert.False(t, r.Changed)
	assert.True(t, r.Persisted)
	assert.NotContains(t, toolNames(t, root), "rmmod")
	assert.NotContains(t, toolNames(t, root), "insmod")
	assert.FileExists(t, filepath.Join(root, "lib/modules", kernel, "updates/tenstorrent.ko"))
}

func TestKMDFastPathWithoutCacheOrHeadersWarns(t *testing.T) {
	a, _ := newHost(t, fakehost.Spec{LoadedKMD: "2.0.0"})
	r := a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.0.0"})
	requireSuccess(t, r)
	assert.False(t, r.Persisted)
	require.NotEmpty(t, r.Warnings)
	assert.Contains(t, r.Warnings[0], "reboot-persistent")
}

func TestKMDRefusesHostManaged(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.29.0", DKMS: true, KernelHeaders: true})
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonHostManaged)
	assert.Equal(t, nodeagent.InstallModeHost, r.InstallMode)
	assert.Contains(t, r.Error.Message, "/var/lib/dkms/tenstorrent")
	assert.Contains(t, r.Error.Message, "/usr/src/tenstorrent-1.29.0/dkms.conf")
	assert.Empty(t, toolNames(t, root), "a host-managed node must not be touched")
	assert.Equal(t, "1.29.0", observe(t, root).LoadedKMD)
}

func holderSpec() fakehost.Spec {
	return fakehost.Spec{
		LoadedKMD: "1.31.0", KernelHeaders: true,
		Holders: []fakehost.Holder{
			{PID: pidA, Comm: "python3", PodUID: podA, ContainerID: cidA},
			{PID: pidB, Comm: "tt-telemetry", PodUID: podB, ContainerID: cidB, CgroupV1: true, Devices: []int{0, 1}},
			{PID: pidC, Comm: "pytest"},
		},
	}
}

func TestKMDHolderBlocksWithoutForce(t *testing.T) {
	a, root := newHost(t, holderSpec())
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonDeviceInUse)
	for _, want := range []string{strconv.Itoa(pidA), strconv.Itoa(pidB), strconv.Itoa(pidC), podA, podB,
		"refcnt > 0 and forceUnload is false; cannot reinstall 2.0.0"} {
		assert.Contains(t, r.Error.Message, want)
	}
	assert.Equal(t, []nodeagent.Holder{
		{PID: pidA, Comm: "python3", Via: nodeagent.HeldByFD, PodUID: podA, ContainerID: cidA},
		{PID: pidB, Comm: "tt-telemetry", Via: nodeagent.HeldByFD, PodUID: podB, ContainerID: cidB},
		{PID: pidC, Comm: "pytest", Via: nodeagent.HeldByFD},
	}, r.Holders)
	assert.Empty(t, toolNames(t, root), "must fail before building or unloading")
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
}

func TestKMDForceUnloadKillsHolders(t *testing.T) {
	a, root := newHost(t, holderSpec())
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0", ForceUnload: true}))
	requireSuccess(t, r)
	require.Len(t, r.Holders, 3)
	for _, h := range r.Holders {
		assert.True(t, h.Killed, "pid %d", h.PID)
	}
	kills := callsTo(t, root, "kill")
	require.Len(t, kills, 1)
	assert.Equal(t, []string{"kill", "-KILL", strconv.Itoa(pidA), strconv.Itoa(pidB), strconv.Itoa(pidC)}, kills[0])
	o := observe(t, root)
	assert.Equal(t, []int{1}, o.PIDs, "only non-holders survive")
	assert.Equal(t, "2.0.0", o.LoadedKMD)
}

func TestKMDForceUnloadFailures(t *testing.T) {
	two := 2
	tests := []struct {
		name   string
		spec   fakehost.Spec
		reason nodeagent.Reason
		want   string
	}{
		{
			name: "holder survives SIGKILL",
			spec: fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, Holders: []fakehost.Holder{
				{PID: pidA, Comm: "stuck", PodUID: podA, ContainerID: cidA, Unkillable: true},
			}},
			reason: nodeagent.ReasonHoldersRemain,
			want:   strconv.Itoa(pidA),
		},
		{
			name:   "holders invisible (no hostPID)",
			spec:   fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, Refcnt: &two},
			reason: nodeagent.ReasonHoldersNotVisible,
			want:   "hostPID",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, root := newHost(t, tc.spec)
			r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0", ForceUnload: true, UnloadWait: 100 * time.Millisecond}))
			requireFailure(t, r, tc.reason)
			assert.Contains(t, r.Error.Message, tc.want)
			assert.NotContains(t, toolNames(t, root), "rmmod")
			assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD, "old driver must stay loaded")
		})
	}
}

func TestKMDBuildFailuresPrintNothing(t *testing.T) {
	tests := []struct {
		name   string
		spec   fakehost.Spec
		reason nodeagent.Reason
		want   string
	}{
		{"missing headers", fakehost.Spec{LoadedKMD: "1.31.0"}, nodeagent.ReasonNoKernelHeaders,
			"host has no kernel build tree at /lib/modules/" + kernel + "/build"},
		{"missing tag", fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, MissingTags: []string{"ttkmd-2.0.0"}},
			nodeagent.ReasonCloneFailed, "ttkmd-2.0.0"},
		{"compiler mismatch", fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, BrokenBuild: true},
			nodeagent.ReasonBuildFailed, "2.0.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, root := newHost(t, tc.spec)
			var out strings.Builder
			a.Publish = &out
			r := a.KMDBuild(context.Background(), nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: fakehost.FakeCommit("ttkmd-2.0.0")})
			requireFailure(t, r, tc.reason)
			assert.Contains(t, r.Error.Message, tc.want)
			assert.Empty(t, out.String())
			assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
			assert.NotContains(t, toolNames(t, root), "rmmod")
			leftovers, _ := filepath.Glob(filepath.Join(root, "var/cache/tt-kmd/.build-*"))
			assert.Empty(t, leftovers, "build dirs must be cleaned up")
		})
	}
	t.Run("build output is reported", func(t *testing.T) {
		a, _ := newHost(t, fakehost.Spec{KernelHeaders: true, BrokenBuild: true})
		a.Publish = &strings.Builder{}
		r := a.KMDBuild(context.Background(), nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: fakehost.FakeCommit("ttkmd-2.0.0")})
		requireFailure(t, r, nodeagent.ReasonBuildFailed)
		assert.Contains(t, r.OutputTail, "gcc-12: not found")
	})
}

func TestKMDPersistenceAndDevicePermissions(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{KernelHeaders: true})
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	assert.Equal(t, "", r.Before)
	assert.True(t, r.Persisted)

	ko, err := os.ReadFile(filepath.Join(root, "lib/modules", kernel, "updates/tenstorrent.ko"))
	require.NoError(t, err)
	assert.Equal(t, fakehost.KernelObject("2.0.0", kernel), ko)
	dep, err := os.ReadFile(filepath.Join(root, "lib/modules", kernel, "modules.dep"))
	require.NoError(t, err)
	assert.Contains(t, string(dep), "updates/tenstorrent.ko:")
	conf, err := os.ReadFile(filepath.Join(root, "etc/modules-load.d/tenstorrent.conf"))
	require.NoError(t, err)
	assert.Contains(t, strings.Split(string(conf), "\n"), "tenstorrent")
	rule, err := os.ReadFile(filepath.Join(root, "etc/udev/rules.d/50-tenstorrent.rules"))
	require.NoError(t, err)
	assert.Contains(t, string(rule), `MODE="0666"`)
	fi, err := os.Stat(filepath.Join(root, "dev/tenstorrent/0"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm())
	depmod := callsTo(t, root, "depmod")
	require.Len(t, depmod, 1)
	assert.Equal(t, []string{"depmod", "-a", kernel}, depmod[0], "the host's depmod, inside its root")
}

func TestKMDPersistWinsOverStaleExtraCopy(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{KernelHeaders: true})
	stale := filepath.Join(root, "lib/modules", kernel, "extra/tenstorrent.ko")
	require.NoError(t, os.MkdirAll(filepath.Dir(stale), 0o755))
	require.NoError(t, os.WriteFile(stale, fakehost.KernelObject("1.20.0", kernel), 0o644))

	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	assert.True(t, r.Persisted)
	probe := callsTo(t, root, "modprobe")
	require.Len(t, probe, 2)
	assert.Equal(t, []string{"modprobe", "-c"}, probe[0], "the host's module options, before the load")
	assert.Equal(t, []string{"modprobe", "-S", kernel, "--show-depends", "tenstorrent"}, probe[1], "the host's modprobe, inside its root")
	dep, err := os.ReadFile(filepath.Join(root, "lib/modules", kernel, "modules.dep"))
	require.NoError(t, err)
	assert.NotContains(t, string(dep), "extra/tenstorrent.ko")
}

func TestProbeMeasuresWithoutChanging(t *testing.T) {
	spec := fakehost.Spec{LoadedKMD: "2.7.0", KernelHeaders: true, CachedKMD: []string{"2.7.0"}, HostTTSMI: "5.0.0",
		Holders: []fakehost.Holder{{PID: 4500001, Comm: "bench"}}}
	a, root := newHost(t, spec)
	r := a.Probe(context.Background(), nodeagent.ProbeOptions{KMDVersion: "2.8.0", AgentVersion: "v1.2.3"})
	requireSuccess(t, r)
	require.NotNil(t, r.Probe)
	assert.Equal(t, "2.7.0", r.Before)
	assert.Equal(t, fakehost.DefaultKernel, r.Kernel)
	assert.True(t, r.Probe.Headers)
	assert.False(t, r.Probe.Cached, "2.8.0 was never built here")
	assert.Equal(t, "5.0.0", r.Probe.SMI)
	assert.Equal(t, "v1.2.3", r.Probe.AgentVersion)
	assert.Empty(t, r.Probe.DKMS)
	require.Len(t, r.Holders, 1)
	assert.Equal(t, 4500001, r.Holders[0].PID)
	assert.Len(t, r.Devices, 2)
	assert.False(t, r.Changed)
	for _, name := range toolNames(t, root) {
		assert.NotContains(t, []string{"rmmod", "insmod", "kill", "tt-flash"}, name)
	}
	b, err := nodeagent.EncodeResult(r)
	require.NoError(t, err)
	back, err := nodeagent.ParseResult(b)
	require.NoError(t, err, "the CLI must read a probe's result back")
	assert.Equal(t, r.Probe, back.Probe)

	dkms, _ := newHost(t, fakehost.Spec{LoadedKMD: "1.29.0", DKMS: true})
	r = dkms.Probe(context.Background(), nodeagent.ProbeOptions{})
	requireSuccess(t, r)
	assert.NotEmpty(t, r.Probe.DKMS)
	assert.False(t, r.Probe.Headers)
}

func TestKMDBuildsAgainstDebianSplitHeaders(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, DebianHeaders: true})
	a.Publish = &strings.Builder{}
	r := a.KMDBuild(context.Background(), nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: fakehost.FakeCommit("ttkmd-2.0.0")})
	requireSuccess(t, r)
	assert.Equal(t, fakehost.BuiltKernelObject(root, "2.0.0", kernel), readFile(t, filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0",
		r.Module.SHA256[:16], "tenstorrent.ko")))
	require.NotEmpty(t, callsTo(t, root, "chroot"), "the build runs in a chroot of the host")

	bare, _ := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, NoToolchain: true})
	p := bare.Probe(context.Background(), nodeagent.ProbeOptions{KMDVersion: "2.0.0"})
	requireSuccess(t, p)
	assert.True(t, p.Probe.Headers)
	assert.False(t, p.Probe.Toolchain, "headers without make/gcc on the host")
}

// The kernel refuses the unsigned module a container build makes under
// Secure Boot lockdown, module.sig_enforce or kernel.modules_disabled: the
// agent says so before unloading anything, and the old driver stays.
func TestKMDRefusesWhenTheKernelWouldRefuseTheModule(t *testing.T) {
	for name, spec := range map[string]fakehost.Spec{
		"lockdown":         {Lockdown: "integrity"},
		"sig_enforce":      {SigEnforce: true},
		"modules_disabled": {ModulesDisabled: true},
	} {
		t.Run(name, func(t *testing.T) {
			spec.LoadedKMD, spec.KernelHeaders = "1.31.0", true
			a, root := newHost(t, spec)
			r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
			requireFailure(t, r, nodeagent.ReasonInsmodFailed)
			assert.Contains(t, r.Error.Message, "stays loaded")
			assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
			assert.NotContains(t, toolNames(t, root), "rmmod")
		})
	}
}

// A module needing symbols the running kernel lacks is refused by insmod;
// the agent puts the cached previous version back.
func TestKMDUnknownSymbolsRollBack(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, CachedKMD: []string{"1.31.0"},
		UnresolvedKMD: []string{"2.0.0"}})
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonInsmodFailed)
	assert.Contains(t, r.OutputTail, "Unknown symbol in module")
	assert.Contains(t, r.Error.Message, "rolled back to tt-kmd 1.31.0")
	_ = root
}

// The same, with the previous version not in rollbook's cache (after
// cleanup --host-caches, or a fleet the operator installed): the host's
// own installed copy goes back, through its modprobe.
func TestKMDRollsBackToTheHostsCopyWhenUncached(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", InstalledKMD: "1.31.0", KernelHeaders: true,
		UnresolvedKMD: []string{"2.0.0"}})
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonInsmodFailed)
	assert.Contains(t, r.Error.Message, "rolled back to tt-kmd 1.31.0 (the host's installed copy)")
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
	assert.Equal(t, "1.31.0", r.After, "the result says what is loaded")

	// Nothing installed either: said so.
	a, _ = newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, UnresolvedKMD: []string{"2.0.0"}})
	r = a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireFailure(t, r, nodeagent.ReasonInsmodFailed)
	assert.Contains(t, r.Error.Message, "neither cached nor installed on the host")
}

// With the agent's rule installed (upstream's, with by-id links), udev
// gives each device a stable /dev/tenstorrent/by-id link.
func TestKMDUdevRuleGivesByIDLinks(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	requireSuccess(t, a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"})))
	rule := string(readFile(t, filepath.Join(root, "etc/udev/rules.d/50-tenstorrent.rules")))
	assert.Contains(t, rule, `SYMLINK+="tenstorrent/by-id/wormhole-%s{tt_asic_id}"`)
	links, err := filepath.Glob(filepath.Join(root, "dev/tenstorrent/by-id/wormhole-*"))
	require.NoError(t, err)
	assert.Len(t, links, 0, "the rule applies to the next load")
	// Reload (as the next upgrade does): udev links the new nodes.
	requireSuccess(t, a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "1.31.0"})))
	links, err = filepath.Glob(filepath.Join(root, "dev/tenstorrent/by-id/wormhole-*"))
	require.NoError(t, err)
	assert.Len(t, links, 2)
	fi, err := os.Stat(filepath.Join(root, "dev/tenstorrent/0"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm(), "by-id is skipped by the chmod of device nodes, 0 is not")
}

// The host's module options (its modprobe.d) reach the driver the agent
// loads, as they reach the one the host boots through modprobe: insmod
// alone would load it with tt-kmd's defaults (max_devices=32, reset_limit=10).
func TestKMDLoadsWithTheHostsModuleOptions(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.34.0", KernelHeaders: true})
	conf := filepath.Join(root, "etc/modprobe.d/tenstorrent.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(conf), 0o755))
	require.NoError(t, os.WriteFile(conf, []byte("options tenstorrent max_devices=8\noptions tenstorrent reset_limit=5\n"), 0o644))

	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	for name, want := range map[string]string{"max_devices": "8", "reset_limit": "5"} {
		got, err := os.ReadFile(filepath.Join(root, "sys/module/tenstorrent/parameters", name))
		require.NoError(t, err, "the loaded module has no %s parameter", name)
		assert.Equal(t, want, strings.TrimSpace(string(got)), name)
	}
}

// A udev rule the host put at tt-kmd's path (DKMS's post-install copies
// upstream's there; an admin may add symlinks or a stricter mode) is the
// host's: the agent keeps it as it is, and leaves device modes to it.
func TestKMDKeepsTheHostsOwnUdevRule(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.34.0", KernelHeaders: true})
	rule := filepath.Join(root, "etc/udev/rules.d/50-tenstorrent.rules")
	own := "SUBSYSTEM==\"tenstorrent\", MODE=\"0660\", GROUP=\"render\"\n" +
		"SUBSYSTEM==\"tenstorrent\", ATTR{tt_asic_id}==\"?*\", SYMLINK+=\"tenstorrent/by-asic/%s{tt_asic_id}\"\n"
	require.NoError(t, os.MkdirAll(filepath.Dir(rule), 0o755))
	require.NoError(t, os.WriteFile(rule, []byte(own), 0o644))

	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	got, err := os.ReadFile(rule)
	require.NoError(t, err)
	assert.Equal(t, own, string(got), "the host's rule was rewritten")
	fi, err := os.Stat(filepath.Join(root, "dev/tenstorrent/0"))
	require.NoError(t, err)
	assert.NotEqual(t, os.FileMode(0o666), fi.Mode().Perm(), "device mode set against the host's rule")
}

// Holders that are exiting (a drained pod's container dies as its pod
// goes) close their fds before their /proc entries go: a refcount no
// process explains is given a moment to drop before the device counts as
// in use.
func TestKMDWaitsForExitingHolders(t *testing.T) {
	two := 2
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, Refcnt: &two})
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = os.WriteFile(filepath.Join(root, "sys/module/tenstorrent/refcnt"), []byte("0\n"), 0o644)
	}()
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	assert.Equal(t, "2.0.0", observe(t, root).LoadedKMD)
}
