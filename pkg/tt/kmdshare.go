package tt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Build once per kernel. The first node of a run that needs tt-kmd V for
// kernel K builds it; its helper prints the module in its log (helpers have
// no API credentials), and the CLI, after checking the bytes against the
// helper's measured record, publishes them as an immutable ConfigMap in the
// helper namespace named from the key. Every later node with kernel K gets
// that ConfigMap as a read-only volume of its kmd helper, which checks it
// again (checksum, version, kernel, commit, vermagic) and takes the cache
// hit path. Nodes of a kernel group wait, before their cordon, for the
// group's builder: one build per kernel, and no node out of service while
// it waits.

// Labels and mount of shared modules.
const (
	LabelSharedModule = "rollbook.dev/tt-kmd-module"
	// SharedModuleMount is where a kmd helper finds the shared module
	// (deploy/admission/helper-policy.yaml admits exactly this mount).
	SharedModuleMount  = "/rollbook/module"
	sharedModuleVolume = "module"
	// signingKey is the key's part for an unsigned module; a signed one
	// has its signing key's identity (SigningConfig.identity), so a signed
	// and an unsigned build, or two keys' builds, are never mixed up.
	signingKey = "unsigned"
)

// SharedModuleNamePattern is the RE2 every SharedModuleName matches.
const SharedModuleNamePattern = `^tt-kmd-[0-9a-f]{16}$`

// SharedModuleName is the ConfigMap of the unsigned module for (kernel,
// version, pinned commit or none): tt-kmd-<16 hex digits>.
func SharedModuleName(kernel, version, commit string) string {
	return sharedModuleName(kernel, version, commit, signingKey)
}

func sharedModuleName(kernel, version, commit, signing string) string {
	if commit == "" {
		commit = "tag"
	}
	sum := sha256.Sum256([]byte(kernel + "\x00" + version + "\x00" + commit + "\x00" + signing))
	return "tt-kmd-" + hex.EncodeToString(sum[:])[:16]
}

// SharedModule is a published module, as its ConfigMap records it.
type SharedModule struct {
	Name string
	Info nodeagent.ModuleInfo
}

// nodeKernel is the node's running kernel: this run's probe measured it,
// else the kubelet's report (dry runs).
func nodeKernel(f *Facts) string {
	if f.Measured != nil && f.Measured.Kernel != "" {
		return f.Measured.Kernel
	}
	if f.Node != nil {
		return f.Node.Status.NodeInfo.KernelVersion
	}
	return ""
}

// moduleShare is one kmd run's view of the shared modules: which node of
// the run builds each key (in memory: who builds is a scheduling choice,
// the published ConfigMap is the state).
type moduleShare struct {
	cs        kubernetes.Interface
	rec       kube.Recorder
	namespace string
	version   string
	commit    string
	signing   string // SigningConfig.identity

	mu       sync.Mutex
	builders map[string]string        // key → node building it
	released map[string]chan struct{} // closed when that node is done
	// found keeps the modules read as published: a shared module's
	// ConfigMap is immutable, so each is read once per run, not once per
	// node of its kernel (two reads per node before).
	found map[string]*SharedModule
}

func newModuleShare(cs kubernetes.Interface, rec kube.Recorder, cfg *KMDConfig) *moduleShare {
	return &moduleShare{cs: cs, rec: rec, namespace: cfg.Helper.Namespace, version: cfg.Version, commit: cfg.Commit,
		signing:  cfg.Signing.identity(),
		builders: map[string]string{}, released: map[string]chan struct{}{}, found: map[string]*SharedModule{}}
}

func (m *moduleShare) name(f *Facts) string {
	if k := nodeKernel(f); k != "" {
		return sharedModuleName(k, m.version, m.commit, m.signing)
	}
	return ""
}

// read is the published module for the node's kernel, if any.
func (m *moduleShare) read(ctx context.Context, f *Facts) (*SharedModule, error) {
	name := m.name(f)
	if name == "" {
		return nil, nil
	}
	m.mu.Lock()
	sh := m.found[name]
	m.mu.Unlock()
	if sh != nil {
		return sh, nil
	}
	cm, err := m.cs.CoreV1().ConfigMaps(m.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil, nil // not published (or not visible): the node builds
	}
	if err != nil {
		return nil, err
	}
	var info nodeagent.ModuleInfo
	if json.Unmarshal([]byte(cm.Data[nodeagent.SharedInfoKey]), &info) != nil {
		return nil, nil
	}
	sh = &SharedModule{Name: name, Info: info}
	m.mu.Lock()
	m.found[name] = sh
	m.mu.Unlock()
	return sh, nil
}

// shared reports that the module of key is known to be published (this
// run shared or read it).
func (m *moduleShare) shared(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.found[key] != nil
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

// release ends node's claims (published, failed, or its roll ended), so
// the nodes waiting on them go on: to the shared copy, or to build.
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

// decide says whether the node needs no wait for a module (and why).
func (m *moduleShare) decide(f Facts) (bool, string) {
	r := f.Measured
	switch {
	case f.Finished:
		return true, "measured at the target"
	case r != nil && r.KMD == m.version:
		return true, "tt-kmd " + m.version + " is loaded already"
	case r != nil && r.Cached && r.Run != "":
		return true, "tt-kmd " + m.version + " is in the node's own module cache"
	case f.Shared != nil:
		return true, fmt.Sprintf("reuses the module built by %s (configmap %s, SHA-256 %s…)", orUnknown(f.Shared.Info.BuiltBy),
			f.Shared.Name, short(f.Shared.Info.SHA256))
	}
	key := m.name(&f)
	if key == "" {
		return true, "builds (kernel unknown)"
	}
	if m.shared(key) {
		// Shared since f was observed (its builder is done, so a claim
		// would succeed): read it, do not build it again.
		return false, fmt.Sprintf("tt-kmd %s for kernel %s was just shared: reuses it", m.version, nodeKernel(&f))
	}
	if b := m.claim(key, f.Node.Name); b != f.Node.Name {
		return false, fmt.Sprintf("waits for node/%s to build tt-kmd %s for kernel %s, then reuses it", b, m.version, nodeKernel(&f))
	}
	return true, fmt.Sprintf("builds tt-kmd %s for kernel %s and shares it (configmap %s/%s)", m.version, nodeKernel(&f),
		m.namespace, key)
}

func short(s string) string { return s[:min(12, len(s))] }

// waitStep holds a node, before its cordon, while another node of the run
// builds the module for its kernel.
func (m *moduleShare) waitStep() runbook.Step[Facts] {
	return runbook.Step[Facts]{
		ID: "tt.kmd.module", Title: "Build once per kernel",
		Reads: readNode | readShared,
		Doc: "Decide where the node's module comes from: loaded already, its own cache, the module another node built for the " +
			"same kernel (a ConfigMap in the helper namespace, checked again on the node), or a build here by the first node " +
			"of its kernel group, which shares it. The others wait for that build before their cordon.",
		Done: m.decide,
		Plan: func(f Facts) []runbook.Change {
			key := m.name(&f)
			if b := m.claim(key, f.Node.Name); b != f.Node.Name {
				return []runbook.Change{{Object: "configmap/" + m.namespace + "/" + key, Action: "reuse",
					Detail: "the module node/" + b + " builds for kernel " + nodeKernel(&f)}}
			}
			return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "build",
				Detail: "tt-kmd " + m.version + " for kernel " + nodeKernel(&f) + ", shared as configmap/" + m.namespace + "/" + key}}
		},
		Act: func(context.Context, Facts) error { return nil },
		Wait: func(ctx context.Context, f Facts) error {
			// Until the module is shared, or this node is to build it (its
			// builder ended without sharing, and no other waiter took over).
			key := m.name(&f)
			for {
				if err := m.waitFor(ctx, key); err != nil {
					return err
				}
				if sh, err := m.read(ctx, &f); err != nil || sh != nil {
					return err
				}
				if m.claim(key, f.Node.Name) == f.Node.Name {
					return nil
				}
			}
		},
	}
}

// publish shares the module the node's helper built: read from its log,
// checked against its measured record, written as an immutable ConfigMap.
// A module that cannot be shared only costs the other nodes a build.
func (m *moduleShare) publish(ctx context.Context, f Facts, h helperFacts) {
	defer m.release(f.Node.Name)
	r := h.Result
	if r == nil || r.Module == nil || r.Module.Source != "build" {
		return
	}
	info := *r.Module
	if info.BuiltBy == "" {
		info.BuiltBy = f.Node.Name
	}
	name := sharedModuleName(info.Kernel, m.version, m.commit, m.signing)
	created, err := m.share(ctx, h.Pod, name, info)
	if err != nil {
		m.rec.Record(ctx, kube.NodeRef(f.Node), true, "KMDModuleNotShared",
			fmt.Sprintf("the module built here is not shared (other nodes of kernel %s build their own): %v", info.Kernel, err))
		return
	}
	if created {
		m.mu.Lock() // before the release: a node deciding then reuses it
		m.found[name] = &SharedModule{Name: name, Info: info}
		m.mu.Unlock()
	}
	m.rec.Record(ctx, kube.NodeRef(f.Node), false, "KMDModuleShared",
		fmt.Sprintf("shared tt-kmd %s for kernel %s as configmap %s/%s (SHA-256 %s…)", m.version, info.Kernel, m.namespace, name,
			short(info.SHA256)))
}

// share writes the ConfigMap; created is false when it was there already
// (an earlier run's, which nodes read and check like any other).
func (m *moduleShare) share(ctx context.Context, pod *corev1.Pod, name string, info nodeagent.ModuleInfo) (created bool, err error) {
	if info.Version != m.version || (m.commit != "" && info.Commit != m.commit) {
		return false, fmt.Errorf("the helper reports tt-kmd %s commit %s, not what was asked", info.Version, info.Commit)
	}
	gz, err := m.readModule(ctx, pod)
	if err != nil {
		return false, err
	}
	if _, err := nodeagent.CheckSharedModule(gz, info); err != nil {
		return false, fmt.Errorf("the module in the log is not the one the helper measured: %w", err)
	}
	meta, _ := json.Marshal(info)
	immutable := true
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.namespace,
			Labels: map[string]string{LabelSharedModule: m.version, kube.LabelNode: pod.Spec.NodeName},
			Annotations: map[string]string{"rollbook.dev/tt-kmd-kernel": info.Kernel, "rollbook.dev/tt-kmd-commit": info.Commit,
				"rollbook.dev/tt-kmd-sha256": info.SHA256}},
		Immutable:  &immutable,
		Data:       map[string]string{nodeagent.SharedInfoKey: string(meta)},
		BinaryData: map[string][]byte{nodeagent.SharedModuleKey: gz},
	}
	_, err = m.cs.CoreV1().ConfigMaps(m.namespace).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return false, nil // published already (an earlier run); nodes check it anyway
	}
	return err == nil, err
}

// readModule reads the module from the helper's log. A log that is not
// served yet just after the pod ended is read again, briefly.
func (m *moduleShare) readModule(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
	limit := int64(4 * nodeagent.MaxModuleSize)
	var last error
	for attempt := range 5 {
		raw, err := m.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: pod.Spec.Containers[0].Name,
			LimitBytes: &limit}).DoRaw(ctx)
		if err == nil {
			gz, ferr := nodeagent.ReadModuleFrame(raw)
			if ferr == nil {
				return gz, nil
			}
			err = ferr
		}
		last = err
		if apierrors.IsForbidden(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return nil, errors.Join(errors.New("cannot read the module from the helper's log"), last)
}
