package nodeagent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/fakehost/realhost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The tag is resolved to the commit that was built, and the result says
// which; a pin the tag does not resolve to refuses before the build and
// leaves the loaded driver alone.
func TestKMDRecordsAndPinsTheCommit(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	ctx := context.Background()
	want := fakehost.FakeCommit("ttkmd-2.0.0")

	other := strings.Repeat("0", 40)
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", Commit: other})
	requireFailure(t, r, nodeagent.ReasonCommitMismatch)
	assert.Contains(t, r.Error.Message, want)
	assert.Contains(t, r.Error.Message, other)
	assert.Empty(t, callsTo(t, root, "make"), "nothing built")
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
	assert.NoFileExists(t, filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0/tenstorrent.ko"))

	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", Commit: want})
	requireSuccess(t, r)
	assert.Equal(t, want, r.Commit)
	assert.False(t, *r.CacheHit)

	// A cache hit reports the commit its module was built from.
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "1.31.0"})
	requireSuccess(t, r)
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", Commit: want})
	requireSuccess(t, r)
	assert.True(t, *r.CacheHit)
	assert.Equal(t, want, r.Commit)

	requireFailure(t, a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", Commit: "abc123"}), nodeagent.ReasonInvalidInput)
}

// A cached module is used only when its bytes match the checksum recorded
// when it was built: a changed one, or one with no record, is rebuilt.
func TestKMDTrustsOnlyAVerifiedCache(t *testing.T) {
	for name, spoil := range map[string]func(ko string) error{
		"bytes changed": func(ko string) error { return os.WriteFile(ko, []byte("\x7fELF not the module that was built"), 0o644) },
		"no record":     func(ko string) error { return os.Remove(ko + ".json") },
	} {
		t.Run(name, func(t *testing.T) {
			a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, CachedKMD: []string{"2.0.0"}})
			ko := filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0/tenstorrent.ko")
			require.NoError(t, spoil(ko))
			r := a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.0.0"})
			requireSuccess(t, r)
			assert.False(t, *r.CacheHit, "the spoiled module was trusted")
			assert.Len(t, callsTo(t, root, "make"), 1)
			assert.Equal(t, fakehost.KernelObject("2.0.0", kernel), readFile(t, ko), "rebuilt in place")
			require.NotEmpty(t, r.Warnings)
			assert.Contains(t, r.Warnings[0], "cached module not used")
		})
	}
}

// With this machine's real git (the build and kmod tools stay fakes): the
// commit recorded is the one the tag points at, and once the tag is moved
// to another commit a pin of the reviewed one refuses it.
func TestKMDCommitPinWithRealGit(t *testing.T) {
	gitPath, err := realhost.SystemTool("git")
	if err != nil {
		t.Skip(err)
	}
	bin := t.TempDir()
	require.NoError(t, os.Symlink(gitPath, filepath.Join(bin, "git")))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("HOME", t.TempDir())
	url := realhost.ModuleRepo(t, "2.0.0", "2.1.0")
	bare := strings.TrimPrefix(url, "file://")
	revParse := func(ref string) string {
		out, err := exec.Command(gitPath, "-C", bare, "rev-parse", ref+"^{commit}").Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	reviewed := revParse("ttkmd-2.0.0")

	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	r := a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.0.0", GitURL: url, Commit: reviewed, SkipPersist: true})
	requireSuccess(t, r)
	assert.Equal(t, reviewed, r.Commit)
	assert.Contains(t, string(readFile(t, filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0/tenstorrent.ko.json"))), reviewed,
		"the cache's record names the commit built")

	// Someone moves the tag (a force-push of ttkmd-2.0.0 onto 2.1.0's commit).
	out, err := exec.Command(gitPath, "-C", bare, "tag", "-f", "ttkmd-2.0.0", "ttkmd-2.1.0").CombinedOutput()
	require.NoError(t, err, "%s", out)
	moved := revParse("ttkmd-2.0.0")
	require.NotEqual(t, reviewed, moved)
	a, root = newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	r = a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.0.0", GitURL: url, Commit: reviewed})
	requireFailure(t, r, nodeagent.ReasonCommitMismatch)
	assert.Contains(t, r.Error.Message, moved)
	assert.Empty(t, callsTo(t, root, "make"))
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
}
