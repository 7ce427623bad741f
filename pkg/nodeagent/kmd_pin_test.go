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

// The build resolves the tag to the commit it checked out, records it, and
// refuses a tag that resolves elsewhere than the pin before building.
func TestKMDBuildPinsTheCommit(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	var out strings.Builder
	a.Publish = &out
	ctx := context.Background()
	want := fakehost.FakeCommit("ttkmd-2.0.0")

	other := strings.Repeat("0", 40)
	r := a.KMDBuild(ctx, nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: other})
	requireFailure(t, r, nodeagent.ReasonCommitMismatch)
	assert.Contains(t, r.Error.Message, want)
	assert.Contains(t, r.Error.Message, other)
	assert.Empty(t, callsTo(t, root, "make"), "nothing built")
	assert.Empty(t, out.String(), "nothing printed")

	r = a.KMDBuild(ctx, nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: want})
	requireSuccess(t, r)
	assert.Equal(t, want, r.Commit)
	assert.Equal(t, want, r.Module.Commit)
	assert.Contains(t, string(readFile(t, filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0", r.Module.SHA256[:16],
		"tenstorrent.ko.json"))), want, "the cache's record names the commit built")

	requireFailure(t, a.KMDBuild(ctx, nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: "abc123"}), nodeagent.ReasonInvalidInput)
	// No pin (no probe of the roll listed the tag): the build reports what
	// it checked out, for kubectl tt to pin.
	r = a.KMDBuild(ctx, nodeagent.KMDBuildOptions{Version: "2.0.0"})
	requireSuccess(t, r)
	assert.Equal(t, want, r.Module.Commit)
}

// A cached module is loaded only when its bytes are the vouched ones: a
// changed one is passed over for the shared copy, and without a shared
// copy the helper refuses (it never builds its own).
func TestKMDTrustsTheCacheOnlyForTheVouchedBytes(t *testing.T) {
	good := fakehost.KernelObject("2.0.0", kernel)
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	ko := filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0", hexSHA(good)[:16], "tenstorrent.ko")
	require.NoError(t, os.MkdirAll(filepath.Dir(ko), 0o755))
	require.NoError(t, os.WriteFile(ko, fakehost.ELFModule([]string{"name=tenstorrent", "version=2.0.0", "vermagic=" + kernel + " SMP ",
		"description=not the module that was built"}), 0o644))

	r := a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(good)})
	requireFailure(t, r, nodeagent.ReasonModuleNotVouched)
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)

	r = a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(good), ModuleFrom: share(t, good, nil)})
	requireSuccess(t, r)
	assert.Equal(t, "cluster", r.Module.Source)
	assert.Equal(t, good, readFile(t, ko), "the cache entry holds the vouched bytes again")
	assert.Empty(t, callsTo(t, root, "make"))
	ops, _ := fakehost.Ops(root)
	assert.Equal(t, hexSHA(good), ops[len(ops)-1].SHA256)
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

	a, _ := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	var printed strings.Builder
	a.Publish = &printed
	r := a.KMDBuild(context.Background(), nodeagent.KMDBuildOptions{Version: "2.0.0", GitURL: url, Commit: reviewed})
	requireSuccess(t, r)
	assert.Equal(t, reviewed, r.Commit)

	// Someone moves the tag (a force-push of ttkmd-2.0.0 onto 2.1.0's commit).
	out, err := exec.Command(gitPath, "-C", bare, "tag", "-f", "ttkmd-2.0.0", "ttkmd-2.1.0").CombinedOutput()
	require.NoError(t, err, "%s", out)
	moved := revParse("ttkmd-2.0.0")
	require.NotEqual(t, reviewed, moved)
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	a.Publish = &printed
	r = a.KMDBuild(context.Background(), nodeagent.KMDBuildOptions{Version: "2.0.0", GitURL: url, Commit: reviewed})
	requireFailure(t, r, nodeagent.ReasonCommitMismatch)
	assert.Contains(t, r.Error.Message, moved)
	assert.Empty(t, callsTo(t, root, "make"))
	assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
}
