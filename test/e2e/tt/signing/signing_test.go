//go:build e2e

// Package signing rolls tt-kmd onto Secure-Boot nodes: the kernel loads
// only modules signed by a key it trusts (an enrolled MOK), so the module
// built on the node must be signed with that key (--signing-secret), and a
// node without one is refused by the probe before its cordon.
package signing

import (
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
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/tt"
)

// fleetKMD is what the tt-fleet scenario's hosts run and cache (sim/tthost).
const fleetKMD = "2.7.0"

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "tt-fleet"}) }

// The shared e2e helpers (internal/tttest).
var node, host, hostRoot = tttest.Node, tttest.Host, tttest.HostRoot

// keyPair is an admin's module-signing key and certificate, as made for
// MOK enrolment (openssl req -x509 …; mokutil --import).
type keyPair struct {
	key, cert []byte
	sha       string
}

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
	sum := sha256.Sum256(der)
	return keyPair{key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), cert: der, sha: hex.EncodeToString(sum[:])}
}

// secureBoot puts the host under Secure Boot: lockdown integrity and
// module.sig_enforce, trusting the given certificates (enrolled MOKs).
func secureBoot(t *testing.T, root string, trusted ...[]byte) {
	t.Helper()
	if err := fakehost.SetModulePolicy(root, fakehost.Spec{Lockdown: "integrity", SigEnforce: true}); err != nil {
		t.Fatal(err)
	}
	if err := fakehost.TrustCerts(root, trusted...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fakehost.SetModulePolicy(root, fakehost.Spec{}) })
}

// A Secure-Boot node without a signing key is refused before its cordon
// (exit 3, the fix named); with --signing-secret the module built there is
// signed by the enrolled key, loads, and the node is labelled and back in
// service.
func TestSecureBootNodeRollsWithSigningSecret(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	const target = "kwok-node-0"
	root := hostRoot(t, target)
	mok := newKeyPair(t, "fleet module signing")
	secureBoot(t, root, mok.cert)

	// No key: the probe stops it; nothing on the node changes.
	ops, _ := fakehost.Ops(root)
	untouched := simtest.Get(t).NeverCordoned(t, ctx, target)
	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", target)
	if code != cli.ExitBlocked {
		t.Errorf("without a key: exit %d, want %d (blocked)", code, cli.ExitBlocked)
	}
	for _, want := range []string{"the kernel refuses unsigned modules", "--signing-secret", "tt-kmd " + fleetKMD + " stays loaded"} {
		if !strings.Contains(out, want) {
			t.Errorf("without a key: the output does not say %q", want)
		}
	}
	if !untouched() {
		t.Error("without a key: the node was cordoned")
	}
	if after, _ := fakehost.Ops(root); len(after) != len(ops) {
		t.Errorf("without a key: the host changed: %v", after[len(ops):])
	}
	if h := host(t, target); h.LoadedKMD != fleetKMD {
		t.Fatalf("without a key: the host runs %q", h.LoadedKMD)
	}

	// The admin's key in the Secret the policy admits.
	secrets := c.Client.CoreV1().Secrets(deploy.HelperNamespace)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tt.DefaultSigningSecret},
		Data: map[string][]byte{nodeagent.SigningKeyFile: mok.key, nodeagent.SigningCertFile: mok.cert}}
	if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), tt.DefaultSigningSecret, metav1.DeleteOptions{}) })

	out, code = tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", target, "--signing-secret", tt.DefaultSigningSecret)
	if code != 0 {
		t.Fatalf("with --signing-secret: exit %d\n%s", code, out)
	}
	if strings.Contains(out, string(mok.key)) || strings.Contains(out, "PRIVATE KEY") {
		t.Error("the output shows the signing key")
	}
	if h := host(t, target); h.LoadedKMD != "2.8.0" {
		t.Errorf("with --signing-secret the host runs %q, want 2.8.0", h.LoadedKMD)
	}
	n := node(t, target)
	if n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != "2.8.0" || n.Annotations[kube.AnnLeftCordoned] != "" {
		t.Errorf("after the roll: unschedulable %v, label %q, left-cordoned %q", n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion],
			n.Annotations[kube.AnnLeftCordoned])
	}
	// The module loaded is the signed build, cached apart from unsigned ones.
	b, err := os.ReadFile(filepath.Join(root, "var/cache/tt-kmd", n.Status.NodeInfo.KernelVersion, "2.8.0", "signed-"+mok.sha[:16],
		"tenstorrent.ko"))
	if err != nil {
		t.Fatalf("no signed cache entry: %v", err)
	}
	if err := fakehost.CheckModuleSignature(b, mok.cert); err != nil {
		t.Errorf("the cached module: %v", err)
	}
	c.ExpectNoViolations(t)
}

// A --signing-secret that does not exist is bad input: exit 2 with how to
// create it, before any node is touched.
func TestMissingSigningSecretIsBadInput(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, 2*time.Minute)
	const target = "kwok-node-1"
	ops, _ := fakehost.Ops(hostRoot(t, target))
	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", target, "--signing-secret", "no-such-secret")
	if code != cli.ExitUsage {
		t.Errorf("exit %d, want %d", code, cli.ExitUsage)
	}
	for _, want := range []string{"no Secret " + deploy.HelperNamespace + "/no-such-secret", "kubectl -n " + deploy.HelperNamespace + " create secret generic"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	if after, _ := fakehost.Ops(hostRoot(t, target)); len(after) != len(ops) {
		t.Errorf("the host changed: %v", after[len(ops):])
	}
	if n := node(t, target); n.Spec.Unschedulable {
		t.Error("the node was cordoned")
	}
	c.ExpectNoViolations(t)
}

// With the key at the host's MOK paths (Ubuntu's shim-signed layout): a
// path the node lacks is refused by the probe before the cordon, saying
// what is missing; the right paths roll the node with a signed module.
func TestSecureBootNodeRollsWithHostPathKey(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	const target = "kwok-node-1"
	root := hostRoot(t, target)
	mok := newKeyPair(t, "node MOK")
	secureBoot(t, root, mok.cert)
	dir := filepath.Join(root, "var/lib/shim-signed/mok")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"MOK.priv": mok.key, "MOK.der": mok.cert} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keyArgs := func(cert string) []string {
		return []string{"upgrade", "kmd", "--version", "2.8.0", "--nodes", target,
			"--signing-key-host-path", "/var/lib/shim-signed/mok/MOK.priv", "--signing-cert-host-path", cert}
	}

	ops, _ := fakehost.Ops(root)
	untouched := simtest.Get(t).NeverCordoned(t, ctx, target)
	out, code := tttest.Run(t, ctx, keyArgs("/var/lib/shim-signed/mok/MOK.pem")...)
	if code != cli.ExitBlocked || !strings.Contains(out, "cannot be signed") || !strings.Contains(out, "MOK.pem") {
		t.Errorf("a certificate path the node lacks: exit %d, want %d saying it cannot be signed (MOK.pem)", code, cli.ExitBlocked)
	}
	if !untouched() {
		t.Error("a certificate path the node lacks: the node was cordoned")
	}
	if after, _ := fakehost.Ops(root); len(after) != len(ops) {
		t.Errorf("the host changed: %v", after[len(ops):])
	}

	if out, code := tttest.Run(t, ctx, keyArgs("/var/lib/shim-signed/mok/MOK.der")...); code != 0 {
		t.Fatalf("with the host's MOK: exit %d\n%s", code, out)
	}
	n := node(t, target)
	if h := host(t, target); h.LoadedKMD != "2.8.0" || n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != "2.8.0" {
		t.Errorf("after the roll: the host runs %q, unschedulable %v, label %q", h.LoadedKMD, n.Spec.Unschedulable,
			n.Labels[tt.LabelKMDVersion])
	}
	b, err := os.ReadFile(filepath.Join(root, "var/cache/tt-kmd", n.Status.NodeInfo.KernelVersion, "2.8.0", "signed-"+mok.sha[:16],
		"tenstorrent.ko"))
	if err != nil {
		t.Fatalf("no signed cache entry: %v", err)
	}
	if err := fakehost.CheckModuleSignature(b, mok.cert); err != nil {
		t.Errorf("the cached module: %v", err)
	}
	c.ExpectNoViolations(t)
}
