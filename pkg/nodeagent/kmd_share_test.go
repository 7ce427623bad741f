package nodeagent_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/kmodule"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

func hexSHA(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// share lays out what the shared module's ConfigMap volume holds: the
// module gzipped and, when signed, the certificate (DER).
func share(t *testing.T, ko, certDER []byte) string {
	t.Helper()
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(ko)
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, nodeagent.SharedModuleKey), gz.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, nodeagent.SharedInfoKey), []byte(`{"builtBy":"node-b"}`), 0o644))
	if certDER != nil {
		require.NoError(t, os.WriteFile(filepath.Join(dir, nodeagent.SharedCertKey), certDER, 0o644))
	}
	return dir
}

// vouch gives o what kubectl tt gives a kmd helper: the module of
// o.Version for the fake host's kernel, shared, and its SHA-256 (and the
// commit pin, for the builds of installed kernels it does not run).
func vouch(t *testing.T, o nodeagent.KMDOptions) nodeagent.KMDOptions {
	t.Helper()
	if o.ModuleSHA256 == "" && o.ModuleFrom == "" {
		ko := fakehost.KernelObject(o.Version, kernel)
		o.ModuleFrom, o.ModuleSHA256 = share(t, ko, nil), hexSHA(ko)
	}
	if o.Commit == "" {
		o.Commit = fakehost.FakeCommit("ttkmd-" + o.Version)
	}
	return o
}

// kmd-build builds for the running kernel and prints the module; another
// node given those bytes and their SHA-256 loads them (no clone, no build
// there), and every change to them is refused before anything is unloaded.
func TestKMDBuildThenAnotherNodeLoadsExactlyThoseBytes(t *testing.T) {
	ctx := context.Background()
	builder, broot := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	var out bytes.Buffer
	builder.Publish = &out
	commit := fakehost.FakeCommit("ttkmd-2.0.0")
	built := builder.KMDBuild(ctx, nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: commit, GitURL: "file:///mirror/tt-kmd.git"})
	requireSuccess(t, built)
	require.NotNil(t, built.Module)
	assert.Equal(t, nodeagent.OpKMDBuild, built.Op)
	assert.Equal(t, "1.31.0", observe(t, broot).LoadedKMD, "a build loads nothing")
	assert.Empty(t, callsTo(t, broot, "rmmod"))
	assert.Empty(t, callsTo(t, broot, "insmod"))
	m := built.Module
	assert.Equal(t, kernel, m.Kernel)
	assert.Equal(t, fakehost.KernelBuildOf(kernel), m.KernelBuild)
	assert.Equal(t, commit, m.Commit)
	assert.Equal(t, "file:///mirror/tt-kmd.git", m.GitURL)
	gz, err := nodeagent.ReadModuleFrame(out.Bytes())
	require.NoError(t, err)
	raw, err := nodeagent.Gunzip(gz)
	require.NoError(t, err)
	assert.Equal(t, m.SHA256, hexSHA(raw), "the result describes the bytes printed")
	assert.Equal(t, fakehost.BuiltKernelObject(broot, "2.0.0", kernel), raw)

	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: m.SHA256, ModuleFrom: share(t, raw, nil)})
	requireSuccess(t, r)
	assert.False(t, *r.CacheHit, "not in this node's cache: from the cluster")
	assert.Equal(t, "cluster", r.Module.Source)
	assert.Equal(t, "node-b", r.Module.BuiltBy)
	assert.Empty(t, callsTo(t, root, "make"), "a vouched module is not built again")
	assert.Empty(t, callsTo(t, root, "git"))
	ops, _ := fakehost.Ops(root)
	require.NotEmpty(t, ops)
	assert.Equal(t, m.SHA256, ops[len(ops)-1].SHA256, "the kernel was given exactly the vouched bytes")
	assert.FileExists(t, filepath.Join(root, "var/cache/tt-kmd", kernel, "2.0.0", m.SHA256[:16], "tenstorrent.ko"))

	// Again, with only the SHA-256: the node's cache holds those bytes.
	requireSuccess(t, a.KMD(ctx, vouch(t, nodeagent.KMDOptions{Version: "1.31.0"})))
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: m.SHA256})
	requireSuccess(t, r)
	assert.Equal(t, "cache", r.Module.Source)
	assert.True(t, *r.CacheHit)
}

// Every way the module a helper is given can differ from the one vouched
// for is refused before anything is unloaded: its bytes (each byte of it
// changed in turn), what it says it is, an argv SHA-256 of other bytes.
func TestKMDRefusesAModuleNotVouchedFor(t *testing.T) {
	ctx := context.Background()
	good := fakehost.KernelObject("2.0.0", kernel)
	refused := func(t *testing.T, o nodeagent.KMDOptions, want string) {
		t.Helper()
		a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
		r := a.KMD(ctx, o)
		requireFailure(t, r, nodeagent.ReasonModuleNotVouched)
		assert.Contains(t, r.Error.Message, want)
		assert.Contains(t, r.Error.Message, "stays loaded")
		assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
		assert.Empty(t, callsTo(t, root, "rmmod"), "nothing unloaded")
		assert.Empty(t, callsTo(t, root, "make"), "the node does not build its own")
	}
	for i := 0; i < len(good); i += max(1, len(good)/64) {
		bad := bytes.Clone(good)
		bad[i] ^= 0x20
		refused(t, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(good), ModuleFrom: share(t, bad, nil)}, "not the")
	}
	for name, c := range map[string]struct {
		ko   []byte
		want string
	}{
		"another version":     {fakehost.KernelObject("2.0.1", kernel), `tt-kmd "2.0.1"`},
		"another kernel":      {fakehost.KernelObject("2.0.0", "6.8.0-1-generic"), "built for kernel"},
		"another module":      {fakehost.ELFModule([]string{"name=evil", "version=2.0.0", "vermagic=" + kernel + " SMP "}), `"evil"`},
		"not a module at all": {[]byte("#!/bin/sh\n"), "ELF"},
	} {
		t.Run(name, func(t *testing.T) {
			// Vouched for (the argv names these very bytes), yet not tt-kmd
			// 2.0.0 for this kernel.
			refused(t, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(c.ko), ModuleFrom: share(t, c.ko, nil)}, c.want)
		})
	}
	refused(t, nodeagent.KMDOptions{Version: "2.0.0"}, "no module was vouched for")
	refused(t, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(good)}, "no shared module")
}

// A signed module: the helper checks, before anything is unloaded, that
// the signature verifies against the certificate kubectl tt named (its
// SHA-256 in argv, the certificate beside the module), so a module the
// kernel would refuse never replaces a working one; the Secure-Boot kernel
// then loads it.
func TestKMDChecksTheSignatureBeforeUnloading(t *testing.T) {
	ctx := context.Background()
	mok, other := testKeyPair(t, "fleet MOK"), testKeyPair(t, "someone else")
	sign := func(k keyPair, ko []byte) []byte {
		s, err := kmodule.NewSigner(k.key, k.der)
		require.NoError(t, err)
		b, err := s.Sign(ko)
		require.NoError(t, err)
		return b
	}
	ko := fakehost.KernelObject("2.0.0", kernel)
	good := sign(mok, ko)
	secureHost := func(t *testing.T) (*nodeagent.Agent, string) {
		a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, SigEnforce: true, Lockdown: "integrity",
			TrustedCerts: [][]byte{mok.der}})
		return a, root
	}
	a, root := secureHost(t)
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(good), ModuleSigner: mok.sha,
		ModuleFrom: share(t, good, mok.der)})
	requireSuccess(t, r)
	assert.Equal(t, "2.0.0", observe(t, root).LoadedKMD)

	tampered := bytes.Clone(good)
	tampered[len(ko)/2] ^= 1
	for name, c := range map[string]struct {
		ko, cert []byte
		signer   string
		want     string
	}{
		"certificate swapped":   {good, other.der, mok.sha, "not the " + mok.sha},
		"signed by another key": {sign(other, ko), mok.der, mok.sha, "signed by another key"},
		"unsigned":              {ko, mok.der, mok.sha, "not signed"},
		"changed after signing": {tampered, mok.der, mok.sha, "does not match"},
		"no certificate":        {good, nil, mok.sha, "signing certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			a, root := secureHost(t)
			r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(c.ko), ModuleSigner: c.signer,
				ModuleFrom: share(t, c.ko, c.cert)})
			requireFailure(t, r, nodeagent.ReasonModuleNotVouched)
			assert.Contains(t, r.Error.Message, c.want)
			assert.Equal(t, "1.31.0", observe(t, root).LoadedKMD)
			assert.Empty(t, callsTo(t, root, "rmmod"))
		})
	}
}

// One release and build configured otherwise is another kernel: the
// builder's result and the probe name the config; a node whose config
// differs from the one the shared module was built for refuses it before
// anything is unloaded, where its loader would have refused it after the
// rmmod ("disagrees about version of symbol module_layout").
func TestKMDSharedModuleOfAnotherConfigIsRefusedBeforeTheRmmod(t *testing.T) {
	ctx := context.Background()
	builder, broot := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true})
	var out bytes.Buffer
	builder.Publish = &out
	built := builder.KMDBuild(ctx, nodeagent.KMDBuildOptions{Version: "2.0.0", Commit: fakehost.FakeCommit("ttkmd-2.0.0")})
	requireSuccess(t, built)
	require.NotEmpty(t, built.Module.KernelConfig)
	raw := fakehost.BuiltKernelObject(broot, "2.0.0", kernel)
	info, err := json.Marshal(built.Module)
	require.NoError(t, err)
	dir := share(t, raw, nil)
	require.NoError(t, os.WriteFile(filepath.Join(dir, nodeagent.SharedInfoKey), info, 0o644))

	same, _ := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0"})
	other, oroot := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelConfig: []string{"CONFIG_RANDSTRUCT_FULL=y"}})
	ps, po := same.Probe(ctx, nodeagent.ProbeOptions{}), other.Probe(ctx, nodeagent.ProbeOptions{})
	requireSuccess(t, ps)
	requireSuccess(t, po)
	assert.Equal(t, built.Module.KernelConfig, ps.KernelConfig, "a host of the builder's kernel, without headers")
	assert.NotEqual(t, ps.KernelConfig, po.KernelConfig, "the probe tells the two configs apart")
	assert.Equal(t, ps.KernelBuild, po.KernelBuild)

	r := other.KMD(ctx, nodeagent.KMDOptions{Version: "2.0.0", ModuleSHA256: hexSHA(raw), ModuleFrom: dir,
		Commit: fakehost.FakeCommit("ttkmd-2.0.0")})
	requireFailure(t, r, nodeagent.ReasonModuleNotVouched)
	assert.Contains(t, r.Error.Message, "config "+built.Module.KernelConfig)
	assert.Empty(t, callsTo(t, oroot, "rmmod"), "nothing unloaded")
	assert.Equal(t, "1.31.0", observe(t, oroot).LoadedKMD)

}

// The probe names the commit of the loaded build: the build in the node's
// module cache with the loaded module's srcversion. A build of the version
// from other sources, or one the cache does not hold, has none.
func TestProbeNamesTheLoadedBuildsCommit(t *testing.T) {
	ctx := context.Background()
	a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", CachedKMD: []string{"1.31.0"}})
	p := a.Probe(ctx, nodeagent.ProbeOptions{})
	requireSuccess(t, p)
	assert.NotEmpty(t, p.Probe.LoadedSrcVersion)
	assert.Equal(t, fakehost.FakeCommit("ttkmd-1.31.0"), p.Probe.LoadedCommit, "the tag's build, in the cache")

	require.NoError(t, fakehost.LoadForeignBuild(root))
	f := a.Probe(ctx, nodeagent.ProbeOptions{})
	requireSuccess(t, f)
	assert.NotEqual(t, p.Probe.LoadedSrcVersion, f.Probe.LoadedSrcVersion)
	assert.Empty(t, f.Probe.LoadedCommit, "another build of 1.31.0")

	bare, _ := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0"})
	b := bare.Probe(ctx, nodeagent.ProbeOptions{})
	requireSuccess(t, b)
	assert.Equal(t, p.Probe.LoadedSrcVersion, b.Probe.LoadedSrcVersion)
	assert.Empty(t, b.Probe.LoadedCommit, "no cache: the commit is unknown")

	// What the kmd helper loads, a later probe names.
	r := bare.KMD(ctx, vouch(t, nodeagent.KMDOptions{Version: "2.0.0"}))
	requireSuccess(t, r)
	after := bare.Probe(ctx, nodeagent.ProbeOptions{})
	requireSuccess(t, after)
	assert.Equal(t, fakehost.FakeCommit("ttkmd-2.0.0"), after.Probe.LoadedCommit)
}
