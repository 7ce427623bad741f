package tt

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kmodule"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Build once per kernel, vouched for by kubectl tt (docs/security.md,
// "Kernel modules: who vouches"). The first node of a run that needs tt-kmd
// V for a kernel builds it with a kmd-build helper, before its cordon; the
// helper prints the module in its log (helpers have no API credentials).
// kubectl tt reads it, checks it (its .modinfo: name, version, vermagic),
// signs it when it holds a key, records its SHA-256 and publishes it as an
// immutable ConfigMap in the helper namespace. Every kmd helper of the
// kernel group, the builder's included, mounts that ConfigMap and gets the
// SHA-256 (and the signer) in its argv, and loads nothing else. A
// ConfigMap is never trusted for being there: one found under the name
// with other bytes is reported and this run publishes under another name.

// Labels and mount of shared modules.
const (
	LabelSharedModule = "rollbook.dev/tt-kmd-module"
	// SharedModuleMount is where a kmd helper finds the shared module
	// (deploy/admission/helper-policy.yaml admits exactly this mount).
	SharedModuleMount  = "/rollbook/module"
	sharedModuleVolume = "module"
)

// SharedModuleNamePattern is the RE2 every SharedModuleName matches.
const SharedModuleNamePattern = `^tt-kmd-[0-9a-f]{16}$`

// ModuleKey is what a module is built from and for: every part of it is
// in the shared module's name and record.
type ModuleKey struct {
	GitURL, Commit, Version string
	// Kernel and KernelBuild are the release and build (uname -r, -v) of
	// the kernel it is built for: its ABI, which the module's vermagic and
	// symbol versions must match.
	Kernel, KernelBuild string
	// KernelConfig is its config digest (kmodule.ConfigDigest): one
	// release and build may be configured twice, and the loader refuses
	// a module built for the other (its module_layout CRC differs).
	KernelConfig string
	// Signer is the signing key's identity (SigningConfig.identity).
	Signer string
}

func (k ModuleKey) String() string {
	return "tt-kmd " + k.Version + " (" + k.GitURL + " at " + k.Commit + ") for kernel " + k.Kernel
}

// SharedModuleName is the ConfigMap of the module of key whose bytes hash
// to sha: tt-kmd-<16 hex digits of both>. nonce is "" for the name every
// run that builds the same bytes shares; a name taken by other bytes makes
// the run pick a random one.
func SharedModuleName(key ModuleKey, sha, nonce string) string {
	sum := sha256.Sum256([]byte(key.GitURL + "\x00" + key.Commit + "\x00" + key.Version + "\x00" + key.Kernel + "\x00" +
		key.KernelBuild + "\x00" + key.KernelConfig + "\x00" + key.Signer + "\x00" + sha + "\x00" + nonce))
	return "tt-kmd-" + hex.EncodeToString(sum[:])[:16]
}

// SharedModule is the module this run vouches for a node's kernel group.
type SharedModule struct {
	VouchedModule
	Info nodeagent.ModuleInfo
}

// moduleShare is one kmd run's voucher: which node builds each key (a
// scheduling choice, in memory) and the modules it vouched for (in memory:
// what a ConfigMap holds is never evidence for this run).
type moduleShare struct {
	cs        kubernetes.Interface
	rec       kube.Recorder
	namespace string
	version   string
	gitURL    string
	signing   *SigningConfig

	mu       sync.Mutex
	commit   string                   // the roll's pin (--kmd-commit, or the first tag a probe saw)
	pinnedBy string                   // who pinned it
	builders map[string]string        // key → node building it
	released map[string]chan struct{} // closed when that node is done
	vouched  map[string]*SharedModule
	planned  map[string]string // kernel release → the node a plan builds it on
}

func newModuleShare(cs kubernetes.Interface, rec kube.Recorder, cfg *KMDConfig) *moduleShare {
	url := cfg.GitURL
	if url == "" {
		url = nodeagent.DefaultKMDGitURL
	}
	m := &moduleShare{cs: cs, rec: rec, namespace: cfg.Helper.Namespace, version: cfg.Version, gitURL: url, signing: &cfg.Signing,
		commit: cfg.Commit, builders: map[string]string{}, released: map[string]chan struct{}{}, vouched: map[string]*SharedModule{},
		planned: map[string]string{}}
	if m.commit != "" {
		m.pinnedBy = "--kmd-commit"
	}
	return m
}

// pinned is the roll's commit ("" until a probe saw the tag).
func (m *moduleShare) pinned() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commit
}

// pin takes the commit of the tag the node's probe listed as the roll's,
// if none is pinned yet; a probe that saw another commit is refused. A
// probe that did not list this tag at this URL (an earlier run's record of
// a node it left cordoned) says nothing: the build then pins what it
// checked out.
func (m *moduleShare) pin(ctx context.Context, f Facts) error {
	if f.Measured == nil { // a node in progress whose record was removed
		return nil
	}
	t := f.Measured.Tag
	if t == nil || !t.Found || t.Commit == "" || t.Tag != "ttkmd-"+m.version || t.URL != m.gitURL {
		return nil
	}
	return m.pinCommit(ctx, f.Node, t.Commit, "node/"+f.Node.Name+"'s probe")
}

// pinCommit makes commit the roll's, seen by who (the KMDModuleShared
// events name both); another than the pin is refused.
func (m *moduleShare) pinCommit(_ context.Context, node *corev1.Node, commit, who string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.commit == "" {
		m.commit, m.pinnedBy = commit, who
		return nil
	}
	if commit != m.commit {
		return runbook.Blocked(fmt.Errorf("tag ttkmd-%s of %s names commit %s on node %s, not the %s this roll pinned (%s): the "+
			"tag moved during the roll, or the node reaches another repository", m.version, nodeagent.RedactURL(m.gitURL), commit,
			node.Name, m.commit, m.pinnedBy))
	}
	return nil
}

// key is the node's module key ("" Kernel when its kernel is unknown).
func (m *moduleShare) key(f *Facts) ModuleKey {
	k := ModuleKey{GitURL: m.gitURL, Commit: m.pinned(), Version: m.version, Signer: m.signing.identity()}
	if f.Measured != nil && f.Measured.Kernel != "" {
		k.Kernel, k.KernelBuild, k.KernelConfig = f.Measured.Kernel, f.Measured.KernelBuild, f.Measured.KernelConfig
	} else if f.Node != nil {
		k.Kernel = f.Node.Status.NodeInfo.KernelVersion // plans before any probe
	}
	return k
}

// group is the kernel group of key: what the builders and the vouched
// modules of a roll are per (its other parts are the roll's).
func group(k ModuleKey) string { return k.Kernel + "\x00" + k.KernelBuild + "\x00" + k.KernelConfig }

// read is the module this run vouched for the node's kernel group.
func (m *moduleShare) read(_ context.Context, f *Facts) (*SharedModule, error) {
	k := m.key(f)
	if k.Kernel == "" {
		return nil, nil
	}
	return m.vouchedFor(k), nil
}

func (m *moduleShare) vouchedFor(k ModuleKey) *SharedModule {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vouched[group(k)]
}

// claim makes node the builder of key unless another node of the run is;
// it returns the builder.
func (m *moduleShare) claim(key, node string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.builders[key]; ok {
		return b
	}
	m.builders[key], m.released[key] = node, make(chan struct{})
	return node
}

// planBuilder is the node a plan builds the module of kernel release on:
// the first node planned with it. A plan reads earlier probes' records
// (or the kubelet's release), so it groups by release alone.
func (m *moduleShare) planBuilder(kernel, node string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.planned[kernel]; ok {
		return b
	}
	m.planned[kernel] = node
	return node
}

// release ends node's claims (vouched, failed, or its roll ended), so the
// nodes waiting on them go on: to the vouched module, or to build.
func (m *moduleShare) release(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, b := range m.builders {
		if b == node {
			close(m.released[key])
			delete(m.builders, key)
			delete(m.released, key)
		}
	}
}

func (m *moduleShare) waitFor(ctx context.Context, key string) error {
	m.mu.Lock()
	ch := m.released[key]
	m.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// vouch checks the module a node of key built (raw, from its helper's log;
// info, its result), signs it when the run holds a key, and publishes it.
func (m *moduleShare) vouch(ctx context.Context, node *corev1.Node, k ModuleKey, raw []byte, info nodeagent.ModuleInfo) (*SharedModule,
	error) {
	if err := checkBuilt(raw, k, info); err != nil {
		return nil, fmt.Errorf("the module node %s built is refused: %w", node.Name, err)
	}
	if s := m.signing.signer; s != nil {
		signed, err := s.Sign(raw)
		if err != nil {
			return nil, fmt.Errorf("signing the module node %s built: %w", node.Name, err)
		}
		raw = signed
	}
	sha := hexSHA(raw)
	info.SHA256, info.Size, info.Signer, info.Source = sha, int64(len(raw)), m.signing.certSHA256(), ""
	name, err := m.publish(ctx, node, k, raw, info)
	if err != nil {
		return nil, err
	}
	sh := &SharedModule{VouchedModule: VouchedModule{ConfigMap: name, SHA256: sha, Signer: info.Signer}, Info: info}
	m.mu.Lock()
	m.vouched[group(k)] = sh
	m.mu.Unlock()
	signed := ""
	if info.Signer != "" {
		signed = ", signed with certificate SHA-256 " + short(info.Signer) + "…"
	}
	m.mu.Lock()
	by := m.pinnedBy
	m.mu.Unlock()
	m.rec.Record(ctx, kube.NodeRef(node), false, "KMDModuleShared", fmt.Sprintf("vouched for the %s built here (SHA-256 %s…%s; "+
		"the roll's commit, pinned by %s): configmap %s/%s", k, short(sha), signed, by, m.namespace, name))
	return sh, nil
}

// publish creates the module's immutable ConfigMap. The name every run
// building these bytes shares is used when free or holding exactly them;
// taken by other bytes (changed after an earlier run published them, or
// put there by someone), it is reported and a random name is used: this
// run's nodes load only what it vouched for, whatever the namespace holds.
func (m *moduleShare) publish(ctx context.Context, node *corev1.Node, k ModuleKey, raw []byte, info nodeagent.ModuleInfo) (string,
	error) {
	gz, err := gzipBytes(raw)
	if err != nil {
		return "", err
	}
	meta, _ := json.Marshal(info)
	immutable := true
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.namespace,
			Labels: map[string]string{LabelSharedModule: m.version, kube.LabelNode: node.Name},
			Annotations: map[string]string{"rollbook.dev/tt-kmd-kernel": k.Kernel, "rollbook.dev/tt-kmd-commit": k.Commit,
				"rollbook.dev/tt-kmd-sha256": info.SHA256}},
		Immutable:  &immutable,
		Data:       map[string]string{nodeagent.SharedInfoKey: string(meta)},
		BinaryData: map[string][]byte{nodeagent.SharedModuleKey: gz},
	}
	if s := m.signing.signer; s != nil {
		cm.BinaryData[nodeagent.SharedCertKey] = s.Certificate()
	}
	cms := m.cs.CoreV1().ConfigMaps(m.namespace)
	for attempt := range 3 {
		nonce := ""
		if attempt > 0 {
			nonce = randomNonce()
		}
		cm.Name = SharedModuleName(k, info.SHA256, nonce)
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err == nil {
			return cm.Name, nil
		}
		lost := kube.AnswerLost(err) && ctx.Err() == nil // applied or not: what the name holds decides
		if !apierrors.IsAlreadyExists(err) && !lost {
			return "", fmt.Errorf("publishing the module: %w", err)
		}
		found, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if lost && apierrors.IsNotFound(err) {
			continue // not applied: published under the next name
		}
		if err != nil {
			return "", fmt.Errorf("publishing the module: configmap %s exists and cannot be read: %w", cm.Name, err)
		}
		got, err := nodeagent.Gunzip(found.BinaryData[nodeagent.SharedModuleKey])
		sameCert := bytes.Equal(found.BinaryData[nodeagent.SharedCertKey], cm.BinaryData[nodeagent.SharedCertKey])
		if err == nil && bytes.Equal(got, raw) && sameCert {
			return cm.Name, nil // an earlier run's publication of these very bytes
		}
		what := "bytes that are not a module"
		if err == nil {
			what = "a module with SHA-256 " + hexSHA(got)
		}
		m.rec.Record(ctx, kube.NodeRef(node), true, "KMDModuleRefused", fmt.Sprintf("configmap %s/%s, the name of the module "+
			"this run vouched for (SHA-256 %s…), holds %s: it was changed after it was published, or put there by someone; no "+
			"node is given it, and the module is published under another name (delete it, and find out who wrote it)",
			m.namespace, found.Name, short(info.SHA256), what))
	}
	return "", fmt.Errorf("publishing the module: three names were taken by other bytes; see the KMDModuleRefused events")
}

// checkBuilt holds what a node printed to what was asked: a tt-kmd module
// of the version, for the kernel release of the group, that is not signed
// already, and that the helper's result describes.
func checkBuilt(raw []byte, k ModuleKey, info nodeagent.ModuleInfo) error {
	mi, err := kmodule.ReadInfo(raw)
	if err != nil {
		return err
	}
	switch {
	case mi.Name != "tenstorrent":
		return fmt.Errorf("it is module %q, not tenstorrent", mi.Name)
	case mi.Version != k.Version:
		return fmt.Errorf("it is tt-kmd %q, not %s", mi.Version, k.Version)
	case mi.Release() != k.Kernel:
		return fmt.Errorf("it was built for kernel %q (vermagic %q), not %s", mi.Release(), mi.Vermagic, k.Kernel)
	case info.Kernel != k.Kernel || (k.KernelBuild != "" && info.KernelBuild != k.KernelBuild):
		return fmt.Errorf("the helper built it for kernel %q %q, not the group's %q %q", info.Kernel, info.KernelBuild, k.Kernel,
			k.KernelBuild)
	case info.KernelConfig != k.KernelConfig:
		return fmt.Errorf("the helper built it for kernel %s of config %q, not the group's config %q", info.Kernel,
			info.KernelConfig, k.KernelConfig)
	case info.Commit != k.Commit:
		return fmt.Errorf("the helper built commit %q, not the pinned %s", info.Commit, k.Commit)
	case info.SHA256 != hexSHA(raw):
		return fmt.Errorf("its log holds other bytes (SHA-256 %s) than its result describes (%s)", hexSHA(raw), info.SHA256)
	}
	if _, _, signed, _ := kmodule.Split(raw); signed {
		return fmt.Errorf("it carries a signature already: only kubectl tt signs")
	}
	return nil
}

func gzipBytes(raw []byte) ([]byte, error) {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

func hexSHA(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func randomNonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func short(s string) string { return s[:min(12, len(s))] }

// buildsElsewhere: another node of the run builds the module of f's kernel
// group, or it is vouched for already.
func (m *moduleShare) buildsElsewhere(f *Facts) bool {
	k := m.key(f)
	if k.Kernel == "" {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	bl, ok := m.builders[group(k)]
	return m.vouched[group(k)] != nil || (ok && bl != f.Node.Name)
}
