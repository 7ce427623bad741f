package nodeagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// One node builds and prints its module; the other loads that copy (a
// cache hit: no clone, no build) after checking it, and builds for itself
// when the shared copy does not match its record.
func TestKMDSharedModuleIsCheckedThenUsed(t *testing.T) {
	ctx := context.Background()
	builder, _ := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	var out bytes.Buffer
	builder.Publish = &out
	built := builder.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", Publish: true})
	requireSuccess(t, built)
	require.NotNil(t, built.Module)
	assert.Equal(t, "build", built.Module.Source)
	assert.Equal(t, kernel, built.Module.Kernel)
	assert.NotEmpty(t, built.Module.Vermagic)
	gz, err := nodeagent.ReadModuleFrame(out.Bytes())
	require.NoError(t, err)
	_, err = nodeagent.CheckSharedModule(gz, *built.Module)
	require.NoError(t, err)

	share := func(gz []byte, info nodeagent.ModuleInfo) string {
		dir := t.TempDir()
		b, _ := json.Marshal(info)
		require.NoError(t, os.WriteFile(filepath.Join(dir, nodeagent.SharedInfoKey), b, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, nodeagent.SharedModuleKey), gz, 0o644))
		return dir
	}
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", ModuleFrom: share(gz, *built.Module)})
	requireSuccess(t, r)
	require.NotNil(t, r.CacheHit)
	assert.True(t, *r.CacheHit)
	assert.Equal(t, "cluster", r.Module.Source)
	assert.Empty(t, callsTo(t, root, "make"), "a shared module is not built again")
	rec, err := os.ReadFile(filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0/tenstorrent.ko.json"))
	require.NoError(t, err)
	assert.Contains(t, string(rec), built.Module.SHA256)

	// A record whose checksum is not the bytes' (or another version's):
	// refused with a warning, and the node builds its own.
	for name, info := range map[string]nodeagent.ModuleInfo{
		"checksum": func() nodeagent.ModuleInfo {
			i := *built.Module
			i.SHA256 = string(bytes.Repeat([]byte("0"), 64))
			return i
		}(),
		"version": func() nodeagent.ModuleInfo { i := *built.Module; i.Version = "2.0.1"; return i }(),
	} {
		t.Run(name, func(t *testing.T) {
			a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
			r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", ModuleFrom: share(gz, info)})
			requireSuccess(t, r)
			assert.False(t, *r.CacheHit)
			assert.Equal(t, "build", r.Module.Source)
			assert.NotEmpty(t, callsTo(t, root, "make"))
			require.NotEmpty(t, r.Warnings)
			assert.Contains(t, r.Warnings[0], "shared module")
		})
	}
}
