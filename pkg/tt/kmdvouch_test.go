package tt

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/kmodule"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// Every kmd helper shape kubectl tt renders (build; install with or
// without a vouched module, signed or not, with --force-unload) carries no
// Secret, no projected or CSI volume, no env from a Secret, and exactly the
// argv of the grammar in kmdhelpers.go.
func TestKMDHelpersCarryNoKey(t *testing.T) {
	h := HelperConfig{Image: "registry.example/node-agent@sha256:" + strings.Repeat("0", 64), Namespace: "rollbook-system",
		Timeout: 15 * time.Minute, PriorityClass: "rollbook-helper"}
	pin, up := strings.Repeat("c", 40), nodeagent.DefaultKMDGitURL
	mod := &VouchedModule{ConfigMap: "tt-kmd-0123456789abcdef", SHA256: strings.Repeat("a", 64)}
	signed := &VouchedModule{ConfigMap: mod.ConfigMap, SHA256: mod.SHA256, Signer: strings.Repeat("5", 64)}
	cfg := &KMDConfig{Version: "2.8.0", Helper: h, RunID: "r"}
	mirror := &KMDConfig{Version: "2.8.0", Helper: h, RunID: "r", GitURL: "file:///m.git"}
	quick := h
	quick.Timeout = 90 * time.Second
	forced := &KMDConfig{Version: "2.8.0", Helper: quick, RunID: "r", ForceUnload: true}
	shapes := map[string]struct {
		pod  *corev1.Pod
		argv string
	}{
		"build": {KMDBuildHelperSpec(&KMDConfig{Version: "2.8.0", Helper: quick, RunID: "r"}, "n1", pin).Pod(),
			AgentPath + " node-agent kmd-build --version 2.8.0 --commit " + pin + " --git-url " + up + " --timeout 1m0s"},
		"build, no pin yet": {KMDBuildHelperSpec(cfg, "n1", "").Pod(),
			AgentPath + " node-agent kmd-build --version 2.8.0 --git-url " + up + " --timeout 14m30s"},
		"install, loaded already": {KMDHelperSpec(cfg, "n1", pin, nil).Pod(),
			AgentPath + " node-agent kmd --version 2.8.0 --timeout 14m30s --commit " + pin + " --git-url " + up},
		"install": {KMDHelperSpec(mirror, "n1", pin, mod).Pod(),
			AgentPath + " node-agent kmd --version 2.8.0 --timeout 14m30s --commit " + pin + " --git-url file:///m.git --module-sha256 " +
				mod.SHA256 + " --module-from /rollbook/module"},
		"install, signed, force-unload": {KMDHelperSpec(forced, "n1", pin, signed).Pod(),
			AgentPath + " node-agent kmd --version 2.8.0 --timeout 1m0s --commit " + pin + " --git-url " + up +
				" --force-unload --module-sha256 " + mod.SHA256 + " --module-from /rollbook/module --module-signer " + signed.Signer},
	}
	for name, s := range shapes {
		p := s.pod
		if got := strings.Join(p.Spec.Containers[0].Command, " "); got != s.argv {
			t.Errorf("%s: argv\n%s\nwant\n%s", name, got, s.argv)
		}
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil || v.Projected != nil || v.CSI != nil {
				t.Errorf("%s: volume %s is a Secret, projection or CSI volume", name, v.Name)
			}
			if v.ConfigMap != nil && (v.ConfigMap.Name != mod.ConfigMap || !mountedReadOnly(p, v.Name, SharedModuleMount)) {
				t.Errorf("%s: ConfigMap volume %+v", name, v)
			}
		}
		for _, e := range p.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				t.Errorf("%s: env %s from a Secret", name, e.Name)
			}
		}
		if len(p.Spec.Containers[0].EnvFrom) > 0 || (p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken) {
			t.Errorf("%s: envFrom %v, service account token %v", name, p.Spec.Containers[0].EnvFrom, p.Spec.AutomountServiceAccountToken)
		}
		b, _ := json.Marshal(p)
		if strings.Contains(string(b), "PRIVATE KEY") || strings.Contains(string(b), "signing_key.pem") {
			t.Errorf("%s: the spec names a private key", name)
		}
	}
	for name, s := range shapes {
		if r := s.pod.Spec.Containers[0].Resources; r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
			t.Errorf("%s: requests %v, limits %v", name, r.Requests, r.Limits)
		}
	}
	// The build reaches the network through the operator's proxy, as the
	// probe and the install do.
	proxied := h
	proxied.Proxy = map[string]string{"HTTPS_PROXY": "http://proxy.example:3128"}
	if env := KMDBuildHelperSpec(&KMDConfig{Version: "2.8.0", Helper: proxied}, "n1", pin).Env; len(env) != 2 ||
		env[1].Name != "HTTPS_PROXY" {
		t.Errorf("the build helper's env: %v", env)
	}
	build := shapes["build"].pod.Spec.Containers[0].SecurityContext
	if *build.Privileged || !reflect.DeepEqual(build.Capabilities.Add, []corev1.Capability{"SYS_CHROOT"}) ||
		shapes["build"].pod.Spec.HostPID {
		t.Errorf("the build helper: %+v, hostPID %v", build, shapes["build"].pod.Spec.HostPID)
	}
	// A helper an interrupted run created is adopted as it was made.
	p := shapes["install, signed, force-unload"].pod
	if got := vouchedIn(p); got == nil || *got != *signed || commitIn(p) != pin {
		t.Errorf("adoption reads %+v, commit %q", got, commitIn(p))
	}
	if vouchedIn(shapes["install, loaded already"].pod) != nil {
		t.Error("a helper without a module adopted with one")
	}
}

func mountedReadOnly(p *corev1.Pod, volume, path string) bool {
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.Name == volume {
			return m.MountPath == path && m.ReadOnly
		}
	}
	return false
}

// checkBuilt refuses every way a builder's module can differ from what was
// asked, each field of its result and its .modinfo changed in turn.
func TestCheckBuiltRefusesEveryMismatch(t *testing.T) {
	const kernel = "6.1.0-28-amd64"
	k := ModuleKey{GitURL: "https://github.com/tenstorrent/tt-kmd.git", Commit: strings.Repeat("c", 40), Version: "2.8.0",
		Kernel: kernel, KernelBuild: fakehost.KernelBuildOf(kernel), KernelConfig: "0123456789abcdef", Signer: "unsigned"}
	good := fakehost.KernelObject("2.8.0", kernel)
	info := nodeagent.ModuleInfo{SHA256: hexSHA(good), Size: int64(len(good)), Version: "2.8.0", Kernel: kernel,
		KernelBuild: k.KernelBuild, KernelConfig: k.KernelConfig, Commit: k.Commit}
	if err := checkBuilt(good, k, info); err != nil {
		t.Fatalf("the module asked for: %v", err)
	}
	admin := testSigner(t)
	signed, err := admin.Sign(good)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		raw  []byte
		info func(i nodeagent.ModuleInfo) nodeagent.ModuleInfo
	}{
		"another version": {fakehost.KernelObject("2.8.1", kernel), nil},
		"another kernel":  {fakehost.KernelObject("2.8.0", "6.1.0-31-amd64"), nil},
		"another module":  {fakehost.ELFModule([]string{"name=evil", "version=2.8.0", "vermagic=" + kernel + " SMP "}), nil},
		"not a module":    {[]byte("#!/bin/sh\n"), nil},
		"signed already":  {signed, nil},
		"another commit":  {good, func(i nodeagent.ModuleInfo) nodeagent.ModuleInfo { i.Commit = strings.Repeat("d", 40); return i }},
		"another build":   {good, func(i nodeagent.ModuleInfo) nodeagent.ModuleInfo { i.KernelBuild = "#2 SMP"; return i }},
		"another config": {good, func(i nodeagent.ModuleInfo) nodeagent.ModuleInfo {
			i.KernelConfig = "fedcba9876543210"
			return i
		}},
		"no config said":      {good, func(i nodeagent.ModuleInfo) nodeagent.ModuleInfo { i.KernelConfig = ""; return i }},
		"another kernel said": {good, func(i nodeagent.ModuleInfo) nodeagent.ModuleInfo { i.Kernel = "6.1.0-31-amd64"; return i }},
		"other bytes than its result": {good, func(i nodeagent.ModuleInfo) nodeagent.ModuleInfo {
			i.SHA256 = strings.Repeat("0", 64)
			return i
		}},
	} {
		i := info
		if c.info != nil {
			i = c.info(i)
		} else {
			i.SHA256 = hexSHA(c.raw)
		}
		if err := checkBuilt(c.raw, k, i); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func testSigner(t *testing.T) *kmodule.Signer {
	t.Helper()
	key, cert := testKeyFiles(t, t.TempDir())
	k, _ := os.ReadFile(key)
	c, _ := os.ReadFile(cert)
	s, err := kmodule.NewSigner(k, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testKeyFiles(t *testing.T, dir string) (key, cert string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	p8, _ := x509.MarshalPKCS8PrivateKey(k)
	key, cert = filepath.Join(dir, "MOK.priv"), filepath.Join(dir, "MOK.der")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cert, der, 0o644); err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// The key is read on the operator's machine only; the errors name files,
// never their content; the flags that put the key in the cluster or on the
// nodes are refused, saying what to use.
func TestSigningConfig(t *testing.T) {
	dir := t.TempDir()
	key, cert := testKeyFiles(t, dir)
	s := SigningConfig{KeyFile: key, CertFile: cert}
	if err := s.Load(); err != nil {
		t.Fatal(err)
	}
	if s.certSHA256() == "" || !strings.HasPrefix(s.identity(), "cert:") {
		t.Errorf("identity %q", s.identity())
	}
	keyPEM, _ := os.ReadFile(key)
	body := strings.Split(string(keyPEM), "\n")[1]
	for name, c := range map[string]SigningConfig{
		"legacy Secret":     {LegacySecret: "rollbook-tt-signing"},
		"legacy host paths": {LegacyKeyHostPath: "/k", LegacyCertHostPath: "/c"},
		"key alone":         {KeyFile: key},
		"cert as key":       {KeyFile: cert, CertFile: cert},
		"key as cert":       {KeyFile: key, CertFile: key},
		"missing":           {KeyFile: filepath.Join(dir, "nope"), CertFile: cert},
	} {
		err := c.Load()
		if err == nil {
			t.Errorf("%s: loaded", name)
			continue
		}
		if strings.Contains(err.Error(), body) || strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
		if strings.HasPrefix(name, "legacy") && !strings.Contains(err.Error(), "--signing-key FILE --signing-cert FILE") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := s.Load(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key others may read: %v", err)
	}
}

// The roll's commit is pinned once: by the first probe that listed this
// very tag at this URL (a record of another version or repository, an
// earlier run's, pins nothing), else by what the build checked out; a node
// that sees another commit afterwards is refused.
func TestCommitPinnedOncePerRoll(t *testing.T) {
	ctx := context.Background()
	first, second := strings.Repeat("a", 40), strings.Repeat("b", 40)
	facts := func(node, tag, url, commit string) Facts {
		return Facts{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			Measured: &ProbeRecord{Kernel: "6.1.0-28-amd64", Tag: &nodeagent.TagCheck{Tag: tag, URL: url, Found: true, Commit: commit}}}
	}
	up := nodeagent.DefaultKMDGitURL
	m := newModuleShare(nil, noRecorder{}, &KMDConfig{Version: "2.8.0"})
	for _, f := range []Facts{facts("n0", "ttkmd-2.7.0", up, second), facts("n0", "ttkmd-2.8.0", "https://fork.example/tt-kmd.git", second)} {
		if err := m.pin(ctx, f); err != nil || m.pinned() != "" {
			t.Errorf("a record of another tag or URL: pinned %q, %v", m.pinned(), err)
		}
	}
	if err := m.pin(ctx, facts("n1", "ttkmd-2.8.0", up, first)); err != nil || m.pinned() != first {
		t.Fatalf("the first probe of the tag: pinned %q, %v", m.pinned(), err)
	}
	if err := m.pin(ctx, facts("n2", "ttkmd-2.8.0", up, first)); err != nil {
		t.Errorf("the same commit: %v", err)
	}
	if err := m.pin(ctx, facts("n3", "ttkmd-2.8.0", up, second)); err == nil || !strings.Contains(err.Error(), "n1's probe") {
		t.Errorf("another commit after the pin: %v", err)
	}
	if err := m.pinCommit(ctx, facts("n4", "", "", "").Node, second, "a build"); err == nil || m.pinned() != first {
		t.Errorf("a build of another commit: pinned %q, %v", m.pinned(), err)
	}
	pinned := newModuleShare(nil, noRecorder{}, &KMDConfig{Version: "2.8.0", Commit: second})
	if err := pinned.pin(ctx, facts("n1", "ttkmd-2.8.0", up, first)); err == nil || !strings.Contains(err.Error(), "--kmd-commit") {
		t.Errorf("--kmd-commit, then a probe of another commit: %v", err)
	}
}

// Every part of a module key names another shared module, and every part
// that describes the kernel another kernel group: two kernels that differ
// in any of them never share a module.
func TestModuleKeyEveryFieldCounts(t *testing.T) {
	base := ModuleKey{GitURL: "https://github.com/tenstorrent/tt-kmd.git", Commit: strings.Repeat("c", 40), Version: "2.8.0",
		Kernel: "6.1.0-28-amd64", KernelBuild: "#1 SMP", KernelConfig: "0123456789abcdef", Signer: "unsigned"}
	kernelParts := map[string]bool{"Kernel": true, "KernelBuild": true, "KernelConfig": true}
	v := reflect.ValueOf(base)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		changed := base
		reflect.ValueOf(&changed).Elem().Field(i).SetString(v.Field(i).String() + "x")
		if SharedModuleName(changed, "sha", "") == SharedModuleName(base, "sha", "") {
			t.Errorf("%s changed: the same shared module name", f.Name)
		}
		if kernelParts[f.Name] && group(changed) == group(base) {
			t.Errorf("%s changed: the same kernel group", f.Name)
		}
	}
}

// With --kmd-commit, a node at the version is labelled only when its
// loaded build is the pinned commit's; without, the pin is not asked.
func TestLoadedCommitBlockers(t *testing.T) {
	pin, other := strings.Repeat("a", 40), strings.Repeat("b", 40)
	for _, c := range []struct {
		name, pin, loaded string
		blocked           string
	}{
		{"no pin", "", other, ""},
		{"the pinned build", pin, pin, ""},
		{"another commit's build", pin, other, "built from commit " + other},
		{"a build the cache does not hold", pin, "", "its commit is unknown"},
	} {
		r := &ProbeRecord{KMD: "2.8.1", LoadedSrcVersion: "ABC", LoadedCommit: c.loaded}
		got := strings.Join(loadedCommitBlockers(&KMDConfig{Version: "2.8.1", Commit: c.pin}, r), "; ")
		switch {
		case c.blocked == "" && got != "":
			t.Errorf("%s: blocked: %s", c.name, got)
		case c.blocked != "" && !strings.Contains(got, c.blocked):
			t.Errorf("%s: %q, want it to say %q", c.name, got, c.blocked)
		case c.blocked != "" && !strings.Contains(got, "leave out --kmd-commit"):
			t.Errorf("%s: %q names no way on", c.name, got)
		}
	}
}
