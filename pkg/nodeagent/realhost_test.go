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
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The kmd task on a real Debian host root: real git clones the stand-in
// module from a bare repository, real kbuild builds it through the agent's
// `chroot ROOT make` against linux-headers-amd64 with gcc-12, real modinfo
// checks version and vermagic, real depmod -b and modprobe --show-depends
// resolve the persisted copy. Only insmod and rmmod are stand-ins.
func TestKMDOnRealHost(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	host := realhost.Host(t, rootfs)
	t.Setenv("PATH", realhost.Tools(t, rootfs))
	kver := realhost.KernelRelease(t, rootfs)
	url := realhost.ModuleRepo(t, "2.8.0", "2.9.0")
	a := &nodeagent.Agent{Root: host, Node: "real-1", Env: []string{realhost.HostEnv(host)}, Log: testLog{t}, PollInterval: 10 * 1e6}
	ctx := context.Background()

	start := time.Now()
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.8.0", GitURL: url})
	requireSuccess(t, r)
	t.Logf("clone + kbuild + persist of 2.8.0: %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, kver, r.Kernel)
	assert.Equal(t, "2.8.0", r.After)
	require.NotNil(t, r.CacheHit)
	assert.False(t, *r.CacheHit)
	assert.True(t, r.Persisted)

	cached := filepath.Join(host, "var/cache/tt-kmd", kver, "2.8.0/tenstorrent.ko")
	b, err := os.ReadFile(cached)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x7fELF")), "kbuild wrote an ELF module")
	assert.Equal(t, "2.8.0", modinfo(t, rootfs, "version", cached))
	assert.Equal(t, kver, strings.Fields(modinfo(t, rootfs, "vermagic", cached))[0])
	dep, err := os.ReadFile(filepath.Join(host, "lib/modules", kver, "modules.dep"))
	require.NoError(t, err)
	assert.Contains(t, string(dep), "updates/tenstorrent.ko:")

	// Upgrade: builds 2.9.0, unloads 2.8.0, loads 2.9.0, persists it.
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.9.0", GitURL: url})
	requireSuccess(t, r)
	assert.Equal(t, "2.8.0", r.Before)
	assert.Equal(t, "2.9.0", r.After)
	assert.Equal(t, "2.9.0", modinfo(t, rootfs, "version", filepath.Join(host, "lib/modules", kver, "updates/tenstorrent.ko")))

	// Downgrade: a cache hit, no build.
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.8.0", GitURL: url})
	requireSuccess(t, r)
	require.NotNil(t, r.CacheHit)
	assert.True(t, *r.CacheHit)

	// A tag the remote lacks: real git's failure is CloneFailed.
	r = a.KMD(ctx, nodeagent.KMDOptions{Version: "2.10.0", GitURL: url})
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
	r := a.KMD(context.Background(), nodeagent.KMDOptions{Version: "2.8.0", GitURL: realhost.ModuleRepo(t, "2.8.0")})
	requireFailure(t, r, nodeagent.ReasonBuildFailed)
	assert.Contains(t, r.OutputTail, "gcc-12")
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
	requireSuccess(t, a.KMD(ctx, nodeagent.KMDOptions{Version: "2.8.0", GitURL: url}))
	modules := filepath.Join(host, "lib/modules", kver)
	old, err := os.ReadFile(filepath.Join(modules, "updates/tenstorrent.ko"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(modules, "extra"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(modules, "extra/tenstorrent.ko"), old, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(host, "etc/depmod.d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(host, "etc/depmod.d/local.conf"), []byte("search extra updates built-in\n"), 0o644))

	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.9.0", GitURL: url})
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

// Signing on a real Debian host root: the agent signs the module it built
// with the headers' own sign-file (/lib/modules/<kver>/build/scripts ->
// linux-kbuild-6.1) in a chroot of the host, with the hash the headers name
// (sha256), from the host's MOK paths and from a Secret's directory; the
// fake kernel's checker accepts the result for the enrolled certificate
// only. Each key has its own cache entry.
func TestKMDOnRealHostSignsTheModule(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	host := realhost.Host(t, rootfs)
	t.Setenv("PATH", realhost.Tools(t, rootfs))
	kver := realhost.KernelRelease(t, rootfs)
	url := realhost.ModuleRepo(t, "2.8.0", "2.9.0")
	mok, secret := testKeyPair(t, "host MOK"), testKeyPair(t, "Secret key")
	writeFile(t, filepath.Join(host, "var/lib/shim-signed/mok/MOK.priv"), mok.key)
	writeFile(t, filepath.Join(host, "var/lib/shim-signed/mok/MOK.der"), mok.der)
	dir := t.TempDir() // the Secret volume, outside the host
	writeFile(t, filepath.Join(dir, nodeagent.SigningKeyFile), secret.key)
	writeFile(t, filepath.Join(dir, nodeagent.SigningCertFile), secret.pem)
	a := &nodeagent.Agent{Root: host, Node: "real-1", Env: []string{realhost.HostEnv(host)}, Log: testLog{t}, PollInterval: 10 * 1e6}
	ctx := context.Background()

	for _, c := range []struct {
		version         string
		signing         nodeagent.Signing
		enrolled, other keyPair
	}{
		{"2.8.0", nodeagent.Signing{KeyHostPath: "/var/lib/shim-signed/mok/MOK.priv", CertHostPath: "/var/lib/shim-signed/mok/MOK.der"}, mok, secret},
		{"2.9.0", nodeagent.Signing{Dir: dir}, secret, mok},
	} {
		r := a.KMD(ctx, nodeagent.KMDOptions{Version: c.version, GitURL: url, Signing: c.signing})
		requireSuccess(t, r)
		require.NotNil(t, r.Module)
		assert.Equal(t, c.enrolled.sha, r.Module.Signer)
		cached := filepath.Join(host, "var/cache/tt-kmd", kver, c.version, "signed-"+c.enrolled.sha[:16], "tenstorrent.ko")
		b, err := os.ReadFile(cached)
		require.NoError(t, err)
		require.True(t, bytes.HasSuffix(b, []byte("~Module signature appended~\n")), "a signature trailer")
		assert.Equal(t, c.version, modinfo(t, rootfs, "version", cached), "real modinfo still reads the signed module")
		assert.NoError(t, fakehost.CheckModuleSignature(b, c.enrolled.der), "signed by the configured key")
		assert.Error(t, fakehost.CheckModuleSignature(b, c.other.pem), "not by another")
		persisted, err := os.ReadFile(filepath.Join(host, "lib/modules", kver, "updates/tenstorrent.ko"))
		require.NoError(t, err)
		assert.Equal(t, b, persisted, "the signed module is the one persisted")
	}
	// Keys the agent copied for sign-file are gone from the host.
	left, _ := filepath.Glob(filepath.Join(host, "var/cache/tt-kmd/.build-*"))
	assert.Empty(t, left)

	// Without sign-file in the headers: SigningFailed, the old module stays.
	require.NoError(t, os.Remove(filepath.Join(host, "usr/lib/linux-kbuild-6.1/scripts/sign-file")))
	r := a.KMD(ctx, nodeagent.KMDOptions{Version: "2.8.0", GitURL: url, Signing: nodeagent.Signing{Dir: dir}})
	requireFailure(t, r, nodeagent.ReasonSigningFailed)
	assert.Equal(t, "2.9.0", r.After)
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

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, b, 0o600))
}
