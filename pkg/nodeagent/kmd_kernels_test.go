package nodeagent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The module is built and persisted for every installed kernel with
// headers, each against its own tree (what DKMS's autoinstall does); a
// kernel without headers is listed, not a failure; a reboot into a built
// kernel comes back with the module.
func TestKMDPersistsForEveryInstalledKernel(t *testing.T) {
	const next, bare = "6.8.0-50-generic", "6.8.0-51-generic"
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true,
		InstalledKernels: []fakehost.InstalledKernel{{Release: next, Headers: true}, {Release: bare}}})
	ctx := context.Background()

	p := a.Probe(ctx, nodeagent.ProbeOptions{KMDVersion: "2.0.0"})
	requireSuccess(t, p)
	require.Len(t, p.Probe.Kernels, 2)
	assert.Equal(t, nodeagent.KernelFacts{Release: next, Headers: true, Toolchain: true}, p.Probe.Kernels[0])
	assert.Equal(t, nodeagent.KernelFacts{Release: bare}, p.Probe.Kernels[1])

	r := a.KMD(ctx, vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	assert.Equal(t, []string{kernel, next}, r.PersistedKernels)
	assert.Equal(t, []string{bare}, r.NoHeaders)
	assert.Equal(t, kernel, r.Module.Kernel, "the result's module is the running kernel's")
	require.NotEmpty(t, r.Warnings)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), bare+" have no headers")
	for k, want := range map[string]bool{kernel: true, next: true, bare: false} {
		ko, err := os.ReadFile(filepath.Join(root, "lib/modules", k, "updates/tenstorrent.ko"))
		if !want {
			assert.Error(t, err, "nothing for %s", k)
			continue
		}
		require.NoError(t, err, k)
		want := fakehost.BuiltKernelObject(root, "2.0.0", k)
		if k == kernel {
			want = fakehost.KernelObject("2.0.0", k) // the vouched module
		}
		assert.Equal(t, want, ko, "built against %s's own tree", k)
	}
	var depmods []string
	for _, c := range callsTo(t, root, "depmod") {
		depmods = append(depmods, strings.Join(c, " "))
	}
	assert.Equal(t, []string{"depmod -a " + kernel, "depmod -a " + next}, depmods)

	p = a.Probe(ctx, nodeagent.ProbeOptions{KMDVersion: "2.0.0"})
	requireSuccess(t, p)
	assert.True(t, p.Probe.Kernels[0].Cached && p.Probe.Kernels[0].Persisted, "%+v", p.Probe.Kernels[0])

	// Again at the target: the fast path re-persists, from the cache.
	builds := len(callsTo(t, root, "make"))
	r = a.KMD(ctx, vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	assert.Equal(t, []string{kernel, next}, r.PersistedKernels)
	assert.Equal(t, builds, len(callsTo(t, root, "make")), "both kernels' modules come from the cache")

	require.NoError(t, fakehost.Reboot(root, next, false))
	assert.Equal(t, "2.0.0", observe(t, root).LoadedKMD, "a boot into the other kernel loads the module persisted for it")
}

// A non-running kernel whose headers name a compiler the host lacks is
// seen by the probe (the CLI refuses before the cordon); the helper itself
// only warns, since the running kernel's driver is installed.
func TestKMDOtherKernelsCompilerMissing(t *testing.T) {
	const next = "6.12.0-1-amd64"
	a, root := newHost(t, fakehost.Spec{KernelHeaders: true,
		InstalledKernels: []fakehost.InstalledKernel{{Release: next, Headers: true, CC: "gcc-14"}}})
	ctx := context.Background()
	p := a.Probe(ctx, nodeagent.ProbeOptions{KMDVersion: "2.0.0"})
	requireSuccess(t, p)
	require.Len(t, p.Probe.Kernels, 1)
	assert.Equal(t, nodeagent.KernelFacts{Release: next, Headers: true, CC: "gcc-14"}, p.Probe.Kernels[0])

	r := a.KMD(ctx, vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	assert.Equal(t, []string{kernel}, r.PersistedKernels)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), "not persisted for installed kernel "+next)
	assert.NoFileExists(t, filepath.Join(root, "lib/modules", next, "updates/tenstorrent.ko"))
}
