package nodeagent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The probe looks at the remote's tag only when the node would build: a
// cache hit or the module already loaded needs no network.
func TestProbeChecksTheTagUnlessLoaded(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "2.7.0", KernelHeaders: true, CachedKMD: []string{"2.7.0", "2.8.0"},
		MissingTags: []string{"ttkmd-2.9.0"}})
	ctx := context.Background()
	r := a.Probe(ctx, nodeagent.ProbeOptions{KMDVersion: "2.7.0"})
	requireSuccess(t, r)
	assert.Nil(t, r.Probe.Tag, "2.7.0 is loaded")
	assert.Empty(t, callsTo(t, root, "git"))
	// Cached here or not, the roll pins the commit the tag names now (the
	// node's own cache is no voucher for another node).
	r = a.Probe(ctx, nodeagent.ProbeOptions{KMDVersion: "2.8.0"})
	requireSuccess(t, r)
	assert.True(t, r.Probe.Cached)
	require.NotNil(t, r.Probe.Tag)
	assert.Equal(t, fakehost.FakeCommit("ttkmd-2.8.0"), r.Probe.Tag.Commit)
	assert.Equal(t, fakehost.KernelBuildOf(kernel), r.KernelBuild)

	r = a.Probe(ctx, nodeagent.ProbeOptions{KMDVersion: "2.9.1"})
	requireSuccess(t, r)
	require.NotNil(t, r.Probe.Tag)
	assert.True(t, r.Probe.Tag.Found)
	assert.Equal(t, fakehost.FakeCommit("ttkmd-2.9.1"), r.Probe.Tag.Commit)
	assert.Empty(t, r.Probe.Tag.Error)

	r = a.Probe(ctx, nodeagent.ProbeOptions{KMDVersion: "2.9.0"})
	requireSuccess(t, r)
	require.NotNil(t, r.Probe.Tag)
	assert.False(t, r.Probe.Tag.Found, "the remote lacks ttkmd-2.9.0")
	assert.Equal(t, "ttkmd-2.9.0", r.Probe.Tag.Tag)
}

// Debian's headers name gcc-12: another gcc on the host is no toolchain.
func TestProbeNeedsTheCompilerTheHeadersName(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "2.7.0", KernelHeaders: true, DebianHeaders: true})
	r := a.Probe(context.Background(), nodeagent.ProbeOptions{KMDVersion: "2.8.0"})
	requireSuccess(t, r)
	assert.Equal(t, "gcc-12", r.Probe.CC)
	assert.True(t, r.Probe.Toolchain)

	require.NoError(t, os.Rename(filepath.Join(root, "usr/bin/gcc-12"), filepath.Join(root, "usr/bin/gcc-11")))
	r = a.Probe(context.Background(), nodeagent.ProbeOptions{KMDVersion: "2.8.0"})
	requireSuccess(t, r)
	assert.Equal(t, "gcc-12", r.Probe.CC)
	assert.False(t, r.Probe.Toolchain, "gcc-11 is not the gcc-12 the headers name")
}

// The module policy and the cards are measured for the CLI to refuse a
// node before its cordon.
func TestProbeMeasuresLoadPolicyAndDevices(t *testing.T) {
	a, _ := newHost(t, fakehost.Spec{LoadedKMD: "2.7.0", SigEnforce: true})
	r := a.Probe(context.Background(), nodeagent.ProbeOptions{})
	requireSuccess(t, r)
	assert.Contains(t, r.Probe.LoadRefused, "refuses unsigned modules")
	require.NotNil(t, r.Probe.PCIDevices)
	assert.Equal(t, 2, *r.Probe.PCIDevices)
	assert.Equal(t, 2, r.Probe.BoundDevices)

	gone, root := newHost(t, fakehost.Spec{LoadedKMD: "2.7.0"})
	require.NoError(t, fakehost.PullCards(root))
	r = gone.Probe(context.Background(), nodeagent.ProbeOptions{})
	requireSuccess(t, r)
	assert.Empty(t, r.Probe.LoadRefused)
	require.NotNil(t, r.Probe.PCIDevices)
	assert.Zero(t, *r.Probe.PCIDevices)
	assert.Zero(t, r.Probe.BoundDevices)
}

// tt-kmd tagged its releases before 2.0 with two parts (ttkmd-1.34, whose
// module reports version 1.34): such a version is cloned, built and
// verified as it is.
func TestKMDTwoPartVersion(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "2.7.0", KernelHeaders: true})
	p := a.Probe(context.Background(), nodeagent.ProbeOptions{KMDVersion: "1.34"})
	requireSuccess(t, p)
	require.NotNil(t, p.Probe.Tag)
	assert.True(t, p.Probe.Tag.Found)
	r := a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "1.34"}))
	requireSuccess(t, r)
	assert.Equal(t, "1.34", r.After)
	assert.Equal(t, "1.34", observe(t, root).LoadedKMD)
}

// A remote git cannot reach is reported with git's reason, not as a
// missing tag.
func TestProbeReportsAnUnreachableRemote(t *testing.T) {
	a, _ := newHost(t, fakehost.Spec{LoadedKMD: "2.7.0", KernelHeaders: true})
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"fatal: unable to access 'https://git.example/tt-kmd.git/': Could not resolve host: git.example\" >&2\nexit 128\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "git"), []byte(script), 0o755))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := a.Probe(context.Background(), nodeagent.ProbeOptions{KMDVersion: "2.8.0", GitURL: "https://git.example/tt-kmd.git"})
	requireSuccess(t, r)
	require.NotNil(t, r.Probe.Tag)
	assert.False(t, r.Probe.Tag.Found)
	assert.Contains(t, r.Probe.Tag.Error, "Could not resolve host")
	assert.Contains(t, r.Probe.Tag.Error, "exit status 128")
}
