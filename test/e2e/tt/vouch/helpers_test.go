//go:build e2e

// Package vouch holds the e2e tests of "a module is loaded on one node only
// when something that node did not build vouches for it" (docs/security.md,
// "Kernel modules: who vouches"): a shared module changed after its build —
// its ConfigMap replaced during the run, or between runs — is never loaded,
// and no kmd helper ever sees a private key.
package vouch

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Names in a shared module's ConfigMap (nodeagent.SharedModuleKey and
// SharedInfoKey), spelled out: the test is the attacker, who reads them off
// the ConfigMap, not off rollbook's code.
const (
	moduleKey = "tenstorrent.ko.gz"
	recordKey = "module.json"
)

func hexSHA(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func gunzip(t *testing.T, gz []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatalf("the shared module is not gzip: %v", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return out.Bytes()
}

const sigMarker = "~Module signature appended~\n"

// malicious is what someone who may write ConfigMaps in the helper
// namespace would put there instead of ko: a module that loads as well as
// the real one (the same version, name and vermagic) with something of
// theirs in it. A signature ko carried is kept as it was, now over other
// bytes.
func malicious(t *testing.T, ko []byte) []byte {
	t.Helper()
	content, trailer := ko, []byte(nil)
	if bytes.HasSuffix(ko, []byte(sigMarker)) {
		// module ‖ PKCS#7 ‖ struct module_signature (12 bytes, sig_len last, big-endian) ‖ marker
		info := ko[len(ko)-len(sigMarker)-12 : len(ko)-len(sigMarker)]
		n := int(info[8])<<24 | int(info[9])<<16 | int(info[10])<<8 | int(info[11])
		cut := len(ko) - len(sigMarker) - 12 - n
		content, trailer = ko[:cut], ko[cut:]
	}
	f, err := elf.NewFile(bytes.NewReader(content))
	if err != nil {
		t.Fatalf("the shared module is not ELF: %v", err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		t.Fatal("the shared module has no .modinfo")
	}
	raw, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, kv := range bytes.Split(raw, []byte{0}) {
		if len(kv) > 0 {
			fields = append(fields, string(kv))
		}
	}
	fields = append(fields, "description=not the module that was built")
	return append(fakehost.ELFModule(fields), trailer...)
}

// tamper replaces the shared module ConfigMap cm (immutable: deleted and
// created again under its name) with a malicious module and a record that
// agrees with it. It returns the malicious module's SHA-256.
func tamper(t *testing.T, ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) string {
	t.Helper()
	ko := malicious(t, gunzip(t, cm.BinaryData[moduleKey]))
	var rec map[string]any
	if err := json.Unmarshal([]byte(cm.Data[recordKey]), &rec); err != nil {
		t.Fatalf("configmap %s: record %q: %v", cm.Name, cm.Data[recordKey], err)
	}
	rec["sha256"], rec["size"] = hexSHA(ko), len(ko)
	b, _ := json.Marshal(rec)
	fresh := cm.DeepCopy()
	fresh.ObjectMeta = metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace, Labels: cm.Labels, Annotations: cm.Annotations}
	for k, v := range fresh.Annotations {
		if strings.HasSuffix(k, "sha256") && v != "" {
			fresh.Annotations[k] = hexSHA(ko)
		}
	}
	fresh.Data[recordKey] = string(b)
	fresh.BinaryData[moduleKey] = gzipped(ko)
	cms := cs.CoreV1().ConfigMaps(cm.Namespace)
	if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}}); err != nil {
		t.Fatalf("delete configmap %s: %v", cm.Name, err)
	}
	if _, err := cms.Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the tampered configmap %s: %v", cm.Name, err)
	}
	t.Logf("configmap %s now holds a module with SHA-256 %s", cm.Name, hexSHA(ko))
	return hexSHA(ko)
}

// tamperEveryPublished replaces each shared module rollbook publishes from
// now on, as soon as it appears. The returned function stops it and gives
// the SHA-256 of every malicious module it put in their place.
func tamperEveryPublished(t *testing.T, ctx context.Context, cs kubernetes.Interface) func() map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	cms := cs.CoreV1().ConfigMaps(deploy.HelperNamespace)
	l, err := cms.List(ctx, metav1.ListOptions{LabelSelector: tt.LabelSharedModule})
	if err != nil {
		t.Fatal(err)
	}
	// From now on: the modules earlier tests published are not touched.
	w, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: tt.LabelSharedModule, ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	bad := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type != watch.Added {
				continue
			}
			mu.Lock()
			ours := bad[hexSHA(gunzip(t, cm.BinaryData[moduleKey]))]
			mu.Unlock()
			if ours {
				continue
			}
			sha := tamper(t, ctx, cs, cm)
			mu.Lock()
			bad[sha] = true
			mu.Unlock()
		}
	}()
	return func() map[string]bool {
		cancel()
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return bad
	}
}

// loaded are the SHA-256 of every module the node's kernel was given to
// load (the fake kernel's record of insmod and modprobe).
func loaded(t *testing.T, node string) []string {
	t.Helper()
	ops, err := fakehost.Ops(tttest.HostRoot(t, node))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range ops {
		if o.Op == fakehost.OpInsmod {
			out = append(out, o.SHA256)
		}
	}
	return out
}

// neverLoaded fails the test when a node loaded any of bad.
func neverLoaded(t *testing.T, bad map[string]bool, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		for _, sha := range loaded(t, n) {
			if sha == "" {
				t.Errorf("node %s: the fake kernel did not record which bytes it loaded", n)
			}
			if bad[sha] {
				t.Errorf("node %s loaded the module changed after its build (SHA-256 %s)", n, sha)
			}
		}
	}
}

// sharedModules are the shared module ConfigMaps of version.
func sharedModules(t *testing.T, ctx context.Context, cs kubernetes.Interface, version string) []corev1.ConfigMap {
	t.Helper()
	l, err := cs.CoreV1().ConfigMaps(deploy.HelperNamespace).List(ctx, metav1.ListOptions{LabelSelector: tt.LabelSharedModule + "=" + version})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}
