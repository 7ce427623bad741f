//go:build e2e

package vouch

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
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
)

// keyPair is an admin's module-signing key and its certificate, enrolled
// as a MOK on the nodes (openssl req -x509 …; mokutil --import).
type keyPair struct{ key, cert []byte }

func newKeyPair(t *testing.T, cn string) keyPair {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), cert: der}
}

// files writes the pair where the operator keeps it: on their own machine.
func (k keyPair) files(t *testing.T) (key, cert string) {
	t.Helper()
	dir := t.TempDir()
	key, cert = filepath.Join(dir, "MOK.priv"), filepath.Join(dir, "MOK.der")
	if err := os.WriteFile(key, k.key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cert, k.cert, 0o644); err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// secureBoot puts the node's host under Secure Boot (lockdown integrity and
// module.sig_enforce), trusting only the given certificates.
func secureBoot(t *testing.T, node string, trusted ...[]byte) {
	t.Helper()
	root := tttest.HostRoot(t, node)
	if err := fakehost.SetModulePolicy(root, fakehost.Spec{Lockdown: "integrity", SigEnforce: true}); err != nil {
		t.Fatal(err)
	}
	if err := fakehost.TrustCerts(root, trusted...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fakehost.SetModulePolicy(root, fakehost.Spec{}) })
}

// podWatch keeps every helper pod spec created in the helper namespace
// while a test runs.
type podWatch struct {
	mu   sync.Mutex
	pods map[string]corev1.Pod
	stop func()
}

func watchHelperPods(t *testing.T, ctx context.Context, cs kubernetes.Interface) *podWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w, err := cs.CoreV1().Pods(deploy.HelperNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper})
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{pods: map[string]corev1.Pod{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				pw.mu.Lock()
				pw.pods[string(p.UID)] = *p
				pw.mu.Unlock()
			}
		}
	}()
	pw.stop = func() { cancel(); w.Stop(); <-done }
	return pw
}

// noKeyInKMDHelpers fails the test when a kmd helper pod (building or
// installing) could reach a Secret or carries the private key: a Secret or
// projected volume, an env var or envFrom from a Secret, a host path
// outside the host's /, or the key's bytes anywhere in its spec.
func (pw *podWatch) noKeyInKMDHelpers(t *testing.T, key []byte) {
	t.Helper()
	pw.stop()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	kmd := 0
	for _, p := range pw.pods {
		if !strings.HasPrefix(p.Labels[kube.LabelHelper], "kmd") {
			continue
		}
		kmd++
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil || v.Projected != nil || v.CSI != nil {
				t.Errorf("kmd helper %s mounts volume %s from a Secret, a projection or a CSI driver", p.Name, v.Name)
			}
		}
		for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			for _, e := range ctr.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					t.Errorf("kmd helper %s reads env %s from Secret %s", p.Name, e.Name, e.ValueFrom.SecretKeyRef.Name)
				}
			}
			for _, e := range ctr.EnvFrom {
				if e.SecretRef != nil {
					t.Errorf("kmd helper %s reads its env from Secret %s", p.Name, e.SecretRef.Name)
				}
			}
		}
		b, _ := json.Marshal(p.Spec)
		if strings.Contains(string(b), "PRIVATE KEY") || strings.Contains(string(b), strings.TrimSpace(string(key))) {
			t.Errorf("kmd helper %s carries the private key in its spec", p.Name)
		}
	}
	if kmd == 0 {
		t.Error("no kmd helper pod was seen")
	}
}

// keyNowhere fails the test when the private key is in the run's output,
// in any Secret, ConfigMap or Event of the cluster.
func keyNowhere(t *testing.T, ctx context.Context, cs kubernetes.Interface, out string, key []byte) {
	t.Helper()
	body := func(pemKey []byte) string {
		blk, _ := pem.Decode(pemKey)
		return strings.Split(strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: blk.Type, Bytes: blk.Bytes}))), "\n")[1]
	}(key)
	if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, body) {
		t.Error("the run's output shows the private key")
	}
	secrets, err := cs.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if strings.Contains(string(v), body) {
				t.Errorf("Secret %s/%s key %s holds the private key", s.Namespace, s.Name, k)
			}
		}
	}
	cms, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		b, _ := json.Marshal(cm)
		if strings.Contains(string(b), "PRIVATE KEY") || strings.Contains(string(b), body) {
			t.Errorf("ConfigMap %s/%s holds the private key", cm.Namespace, cm.Name)
		}
	}
	events, err := cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.Contains(e.Message, "PRIVATE KEY") || strings.Contains(e.Message, body) {
			t.Errorf("Event %s/%s shows the private key", e.Namespace, e.Name)
		}
	}
}

// Secure-Boot nodes get a module signed by the admin's key, which stays on
// the operator's machine: no kmd helper mounts a Secret or sees the key,
// and it is in no object of the cluster and not in the output.
func TestSignedRollKeepsTheKeyOffTheCluster(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	nodes := []string{"kwok-node-0", "kwok-node-1"}
	mok := newKeyPair(t, "fleet module signing")
	for _, n := range nodes {
		secureBoot(t, n, mok.cert)
	}
	pw := watchHelperPods(t, ctx, c.Client)
	key, cert := mok.files(t)
	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.9.0", "--nodes", strings.Join(nodes, ","),
		"--signing-key", key, "--signing-cert", cert)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	pw.noKeyInKMDHelpers(t, mok.key)
	keyNowhere(t, ctx, c.Client, out, mok.key)
	for _, n := range nodes {
		if h := host(t, n); h.LoadedKMD != "2.9.0" {
			t.Errorf("node %s runs %q, want the signed 2.9.0", n, h.LoadedKMD)
		}
	}
	cms := sharedModules(t, ctx, c.Client, "2.9.0")
	if len(cms) != 1 {
		t.Fatalf("%d shared modules of 2.9.0, want 1 (one kernel)", len(cms))
	}
	if err := fakehost.CheckModuleSignature(gunzip(t, cms[0].BinaryData[moduleKey]), mok.cert); err != nil {
		t.Errorf("configmap %s: the shared module: %v", cms[0].Name, err)
	}

	// Its bytes changed afterwards (the signature kept, now over other
	// bytes): the next run's nodes never load them; it reports the
	// ConfigMap and its own signed module is what loads.
	bad := map[string]bool{tamper(t, ctx, c.Client, &cms[0]): true}
	more := []string{"kwok-node-2", "kwok-node-3"}
	for _, n := range more {
		secureBoot(t, n, mok.cert)
	}
	out, code = tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.9.0", "--nodes", strings.Join(more, ","),
		"--signing-key", key, "--signing-cert", cert)
	if code != 0 {
		t.Fatalf("after the change: exit %d\n%s", code, out)
	}
	neverLoaded(t, bad, more...)
	for _, n := range more {
		if h := host(t, n); h.LoadedKMD != "2.9.0" {
			t.Errorf("node %s runs %q, want the signed 2.9.0", n, h.LoadedKMD)
		}
	}
	reported(t, ctx, c.Client, out, bad, "2.9.0")
	keyNowhere(t, ctx, c.Client, out, mok.key)
}

// A Secure-Boot node, and no key given: refused before its cordon (exit 3,
// saying how to give one), nothing on the node changed.
func TestSecureBootNodeWithoutKeyIsRefusedBeforeItsCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-2"
	secureBoot(t, target, newKeyPair(t, "fleet module signing").cert)
	was := host(t, target).LoadedKMD
	tttest.BlockedUncordoned(t, ctx, target, []string{"the kernel refuses unsigned modules", "--signing-key FILE --signing-cert FILE",
		"tt-kmd " + was + " stays loaded"}, "upgrade", "kmd", "--version", "2.10.0", "--nodes", target)
}

// Bad signing input is a usage error (exit 2) before anything in the
// cluster is touched, saying what to do, and never shows the key: the flags
// of releases that put the key in the cluster or on the nodes, a missing
// file, a key without its certificate, a key of another certificate, a key
// others may read.
func TestSigningBadInput(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-3"
	mok, other := newKeyPair(t, "fleet module signing"), newKeyPair(t, "someone else")
	key, cert := mok.files(t)
	_, otherCert := other.files(t)
	open := filepath.Join(t.TempDir(), "open.priv")
	if err := os.WriteFile(open, mok.key, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"--signing-secret", []string{"--signing-secret", "rollbook-tt-signing"}, "--signing-key FILE --signing-cert FILE"},
		{"host paths", []string{"--signing-key-host-path", "/var/lib/shim-signed/mok/MOK.priv", "--signing-cert-host-path",
			"/var/lib/shim-signed/mok/MOK.der"}, "--signing-key FILE --signing-cert FILE"},
		{"no key file", []string{"--signing-key", filepath.Join(t.TempDir(), "nope"), "--signing-cert", cert}, "no such file"},
		{"key without certificate", []string{"--signing-key", key}, "go together"},
		{"another key's certificate", []string{"--signing-key", key, "--signing-cert", otherCert}, "not the certificate's"},
		{"a key others may read", []string{"--signing-key", open, "--signing-cert", cert}, "chmod 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, _ := fakehost.Ops(tttest.HostRoot(t, target))
			untouched := c.NeverCordoned(t, ctx, target)
			out, code := tttest.Run(t, ctx, append([]string{"upgrade", "kmd", "--version", "2.10.0", "--nodes", target}, tc.args...)...)
			if code != cli.ExitUsage {
				t.Errorf("exit %d, want %d", code, cli.ExitUsage)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("the output does not say %q", tc.want)
			}
			if strings.Contains(out, "PRIVATE KEY") {
				t.Error("the output shows the key")
			}
			if !untouched() {
				t.Error("the node was cordoned")
			}
			if after, _ := fakehost.Ops(tttest.HostRoot(t, target)); len(after) != len(ops) {
				t.Errorf("the host changed: %v", after[len(ops):])
			}
		})
	}
}
