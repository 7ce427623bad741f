package nodeagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/fakehost/realhost"
	"github.com/rollbook/rollbook/pkg/kmodule"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// realBuild builds version with the kmd-build task on the real host (real
// git clone of the stand-in module, real kbuild through `chroot ROOT make`
// against linux-headers-amd64 with gcc-12, real modinfo) and returns what
// kubectl tt reads from its log.
func realBuild(t *testing.T, a *nodeagent.Agent, version, url string) ([]byte, nodeagent.Result) {
	t.Helper()
	var out bytes.Buffer
	a.Publish = &out
	defer func() { a.Publish = nil }()
	r := a.KMDBuild(context.Background(), nodeagent.KMDBuildOptions{Version: version, GitURL: url, Commit: tagCommit(t, url, version)})
	if !r.Success {
		return nil, r
	}
	gz, err := nodeagent.ReadModuleFrame(out.Bytes())
	require.NoError(t, err)
	raw, err := nodeagent.Gunzip(gz)
	require.NoError(t, err)
	return raw, r
}

// tagCommit is the commit tag ttkmd-<version> of the bare repository url
// points at (a pin of zeros for a tag it lacks).
func tagCommit(t *testing.T, url, version string) string {
	t.Helper()
	git, err := realhost.SystemTool("git")
	require.NoError(t, err)
	out, err := exec.Command(git, "-C", strings.TrimPrefix(url, "file://"), "rev-parse", "ttkmd-"+version+"^{commit}").Output()
	if err != nil {
		return strings.Repeat("0", 40)
	}
	return strings.TrimSpace(string(out))
}

// The kmd tasks on a real Debian host root: kmd-build really builds the
// stand-in module, the kmd helper given those bytes checks them (real
// modinfo of version and vermagic), loads them, and persists them with the
// host's real depmod and modprobe --show-depends. Only insmod and rmmod
// are stand-ins.
func TestKMDOnRealHost(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	host := realhost.Host(t, rootfs)
	t.Setenv("PATH", realhost.Tools(t, rootfs))
	kver := realhost.KernelRelease(t, rootfs)
	url := realhost.ModuleRepo(t, "2.8.0", "2.9.0")
	a := &nodeagent.Agent{Root: host, Node: "real-1", Env: []string{realhost.HostEnv(host)}, Log: testLog{t}, PollInterval: 10 * 1e6}
	ctx := context.Background()

	start := time.Now()
	raw, b := realBuild(t, a, "2.8.0", url)
	requireSuccess(t, b)
	t.Logf("clone + kbuild of 2.8.0: %s", time.Since(start).Round(time.Millisecond))
	require.True(t, bytes.HasPrefix(raw, []byte("\x7fELF")), "kbuild wrote an ELF module")
	assert.Equal(t, kver, b.Module.Kernel)
	assert.Equal(t, tagCommit(t, url, "2.8.0"), b.Module.Commit)
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.8.0", GitURL: url, ModuleSHA256: b.Module.SHA256,
		ModuleFrom: share(t, raw, nil)})
	requireSuccess(t, r)
	assert.Equal(t, kver, r.Kernel)
	assert.Equal(t, "2.8.0", r.After)
	assert.True(t, r.Persisted)

	cached := filepath.Join(host, "var/cache/tt-kmd", kver, "2.8.0", b.Module.SHA256[:16], "tenstorrent.ko")
	assert.Equal(t, "2.8.0", modinfo(t, rootfs, "version", cached))
	assert.Equal(t, kver, strings.Fields(modinfo(t, rootfs, "vermagic", cached))[0])
	dep, err := os.ReadFile(filepath.Join(host, "lib/modules", kver, "modules.dep"))
	require.NoError(t, err)
	assert.Contains(t, string(dep), "updates/tenstorrent.ko:")

	// Upgrade: unloads 2.8.0, loads the 2.9.0 built, persists it.
	raw9, b9 := realBuild(t, a, "2.9.0", url)
	requireSuccess(t, b9)
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.9.0", GitURL: url, ModuleSHA256: b9.Module.SHA256, ModuleFrom: share(t, raw9, nil)})
	requireSuccess(t, r)
	assert.Equal(t, "2.8.0", r.Before)
	assert.Equal(t, "2.9.0", r.After)
	assert.Equal(t, "2.9.0", modinfo(t, rootfs, "version", filepath.Join(host, "lib/modules", kver, "updates/tenstorrent.ko")))

	// Downgrade with the SHA-256 alone: the cache holds those bytes.
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.8.0", GitURL: url, ModuleSHA256: b.Module.SHA256})
	requireSuccess(t, r)
	assert.True(t, *r.CacheHit)

	// A tag the remote lacks: real git's failure is CloneFailed.
	_, r = realBuild(t, a, "2.10.0", url)
	requireFailure(t, r, nodeagent.ReasonCloneFailed)
}

// Debian's headers name their compiler (gcc-12 in .kernelvariables): a
// host without it cannot build, whatever other gcc it has.
func TestKMDOnRealHostWithoutTheHeadersCompiler(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	host := realhost.Host(t, rootfs)
	t.Setenv("PATH", realhost.Tools(t, rootfs))
	require.NoError(t, os.Remove(filepath.Join(host, "usr/bin/gcc-12")))
	a := &nodeagent.Agent{Root: host, Env: []string{realhost.HostEnv(host)}, Log: testLog{t}}
	_, r := realBuild(t, a, "2.8.0", realhost.ModuleRepo(t, "2.8.0"))
	requireFailure(t, r, nodeagent.ReasonBuildFailed)
	assert.Contains(t, r.OutputTail, "gcc-12")
}

// Ubuntu's headers name their compiler only in the kernel config (here:
// Debian's without .kernelvariables, on a host whose only compiler is
// gcc-12, so kbuild's default "gcc" is missing): the agent passes the
// kernel's compiler as CC= and the real build succeeds.
func TestKMDOnRealHostBuildsWithTheCompilerTheConfigNames(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	host := realhost.Host(t, rootfs)
	t.Setenv("PATH", realhost.Tools(t, rootfs))
	kver := realhost.KernelRelease(t, rootfs)
	require.NoError(t, os.Remove(filepath.Join(host, "usr/src/linux-headers-"+kver, ".kernelvariables")))
	_, err := os.Lstat(filepath.Join(host, "usr/bin/gcc"))
	require.True(t, os.IsNotExist(err), "the real-host rootfs has no default gcc")
	a := &nodeagent.Agent{Root: host, Env: []string{realhost.HostEnv(host)}, Log: testLog{t}}
	raw, r := realBuild(t, a, "2.8.0", realhost.ModuleRepo(t, "2.8.0"))
	requireSuccess(t, r)
	require.True(t, bytes.HasPrefix(raw, []byte("\x7fELF")), "kbuild wrote an ELF module")
}

// A host whose own depmod.d searches extra/ first (where DKMS-style
// installs leave a copy) still boots the module the agent installed, also
// after the host itself re-runs depmod (a kernel package, another DKMS
// module): the agent indexes with the host's configuration and overrides
// the search order for tenstorrent alone.
func TestKMDOnRealHostBootsItsModuleUnderTheHostsSearchOrder(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	host := realhost.Host(t, rootfs)
	t.Setenv("PATH", realhost.Tools(t, rootfs))
	kver := realhost.KernelRelease(t, rootfs)
	url := realhost.ModuleRepo(t, "2.8.0", "2.9.0")
	a := &nodeagent.Agent{Root: host, Node: "real-1", Env: []string{realhost.HostEnv(host)}, Log: testLog{t}, PollInterval: 10 * 1e6}
	ctx := context.Background()
	raw, b := realBuild(t, a, "2.8.0", url)
	requireSuccess(t, b)
	requireSuccess(t, a.KMD(ctx, nodeagent.KMDOptions{Version: "2.8.0", GitURL: url, ModuleSHA256: b.Module.SHA256,
		ModuleFrom: share(t, raw, nil)}))
	modules := filepath.Join(host, "lib/modules", kver)
	old, err := os.ReadFile(filepath.Join(modules, "updates/tenstorrent.ko"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(modules, "extra"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(modules, "extra/tenstorrent.ko"), old, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(host, "etc/depmod.d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(host, "etc/depmod.d/local.conf"), []byte("search extra updates built-in\n"), 0o644))

	raw9, b9 := realBuild(t, a, "2.9.0", url)
	requireSuccess(t, b9)
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.9.0", GitURL: url, ModuleSHA256: b9.Module.SHA256, ModuleFrom: share(t, raw9, nil)})
	requireSuccess(t, r)
	assert.True(t, r.Persisted)
	onHost := func(argv ...string) string {
		t.Helper()
		cmd := exec.Command("chroot", append([]string{host}, argv...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	want := "insmod /lib/modules/" + kver + "/updates/tenstorrent.ko"
	assert.Equal(t, want, onHost("modprobe", "-S", kver, "--show-depends", "tenstorrent"), "after the agent's depmod")
	onHost("depmod", "-a", kver)
	assert.Equal(t, want, onHost("modprobe", "-S", kver, "--show-depends", "tenstorrent"), "after the host's own depmod")
}

func modinfo(t *testing.T, rootfs, field, ko string) string {
	t.Helper()
	argv := append(realhost.KmodArgv(rootfs, "modinfo"), "-F", field, ko)
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// Signing of a real kbuild module: kubectl tt's signer (pkg/kmodule, held
// byte for byte to the kernel's sign-file by its contract test) signs what
// the real host built; the kmd helper, given the certificate and the
// signed module's SHA-256, checks the signature and loads it; real modinfo
// still reads it; the fake kernel's checker accepts it for that
// certificate only; the signed bytes are the ones persisted for boot.
func TestKMDOnRealHostLoadsTheModuleKubectlTTSigned(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	host := realhost.Host(t, rootfs)
	t.Setenv("PATH", realhost.Tools(t, rootfs))
	kver := realhost.KernelRelease(t, rootfs)
	url := realhost.ModuleRepo(t, "2.8.0")
	mok, other := testKeyPair(t, "fleet MOK"), testKeyPair(t, "someone else")
	a := &nodeagent.Agent{Root: host, Node: "real-1", Env: []string{realhost.HostEnv(host)}, Log: testLog{t}, PollInterval: 10 * 1e6}

	raw, b := realBuild(t, a, "2.8.0", url)
	requireSuccess(t, b)
	s, err := kmodule.NewSigner(mok.key, mok.der)
	require.NoError(t, err)
	signed, err := s.Sign(raw)
	require.NoError(t, err)
	r := a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.8.0", GitURL: url, ModuleSHA256: hexSHA(signed),
		ModuleSigner: mok.sha, ModuleFrom: share(t, signed, mok.der)})
	requireSuccess(t, r)
	assert.Equal(t, mok.sha, r.Module.Signer)
	cached := filepath.Join(host, "var/cache/tt-kmd", kver, "2.8.0", hexSHA(signed)[:16], "tenstorrent.ko")
	assert.Equal(t, "2.8.0", modinfo(t, rootfs, "version", cached), "real modinfo reads the signed module")
	assert.NoError(t, fakehost.CheckModuleSignature(readFile(t, cached), mok.der))
	assert.Error(t, fakehost.CheckModuleSignature(readFile(t, cached), other.pem))
	persisted, err := os.ReadFile(filepath.Join(host, "lib/modules", kver, "updates/tenstorrent.ko"))
	require.NoError(t, err)
	assert.Equal(t, signed, persisted, "the signed module is the one persisted")
}

type keyPair struct {
	key, pem, der []byte
	sha           string
}

func testKeyPair(t *testing.T, cn string) keyPair {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	sum := sha256.Sum256(der)
	return keyPair{key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}),
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), der: der, sha: hex.EncodeToString(sum[:])}
}
