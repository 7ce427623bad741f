package tt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// moduleStep holds a node, before its cordon, until this run vouches for a
// module of its kernel group; the group's first node builds it.
func (m *moduleShare) moduleStep(b *builder, cfg *KMDConfig, blockers func(*Facts) []string) runbook.Step[Facts] {
	clear := probeClear("tt-kmd", cfg.RunID, blockers)
	return runbook.Step[Facts]{
		ID: "tt.kmd.module", Title: "Build once per kernel",
		Reads: readNode | readPods | readShared,
		// What the probe found stops the node before it builds or waits: a
		// node in progress (cordoned by this runbook) passed it already.
		Guards: []runbook.Guard[Facts]{{
			Name: clear.Name,
			Check: func(f Facts) (bool, string) {
				if f.ourCordon() {
					return true, ""
				}
				return clear.Check(f)
			},
		}},
		Doc: "Get the module the node will load, vouched for by kubectl tt: the commit of tag ttkmd-<version> is pinned once " +
			"for the roll (--kmd-commit, or the first probe's git ls-remote); the first node of each kernel group (release, " +
			"build and config of its running kernel) runs a kmd-build helper, before its cordon, which builds the module and " +
			"prints it in its log; kubectl tt reads it, checks its .modinfo (name, version, vermagic), signs it with " +
			"--signing-key when given, and publishes it as an immutable ConfigMap. The other nodes of the group wait for " +
			"that, uncordoned. A node at the target already needs none.",
		Done: m.decide,
		Plan: func(f Facts) []runbook.Change {
			// A plan groups by kernel release (nodes not probed yet have
			// only the kubelet's), in the roll's order.
			k := m.key(&f)
			if bl := m.planBuilder(k.Kernel, f.Node.Name); bl != f.Node.Name {
				return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "reuse",
					Detail: "the module node/" + bl + " builds for kernel " + k.Kernel + ", once kubectl tt vouched for it"}}
			}
			return []runbook.Change{{Object: "pod/" + m.namespace + "/" + kube.HelperName(kmdBuildTask, f.Node.Name, m.version),
				Action: "create", Detail: "kmd-build: builds tt-kmd " + m.version + " for kernel " + k.Kernel + " and shares it"}}
		},
		Act: func(ctx context.Context, f Facts) error { return m.pin(ctx, f) },
		Wait: func(ctx context.Context, f Facts) error {
			// Until a module is vouched for the group, or this node is to
			// build it (no other node of the run does).
			k := m.key(&f)
			for {
				if m.vouchedFor(k) != nil {
					return nil
				}
				if m.claim(group(k), f.Node.Name) == f.Node.Name {
					return m.build(ctx, b, cfg, f, k)
				}
				if err := m.waitFor(ctx, group(k)); err != nil {
					return err
				}
			}
		},
	}
}

// decide says whether the node has the module it needs (and which).
func (m *moduleShare) decide(f Facts) (bool, string) {
	r := f.Measured
	switch {
	case f.Finished:
		return true, "measured at the target"
	case r != nil && r.KMD == m.version:
		return true, "tt-kmd " + m.version + " is loaded already"
	case f.Shared != nil:
		s := fmt.Sprintf("loads the module kubectl tt vouched for: built by %s, SHA-256 %s…, configmap %s",
			orUnknown(f.Shared.Info.BuiltBy), short(f.Shared.SHA256), f.Shared.ConfigMap)
		if f.Shared.Signer != "" {
			s += ", signed with certificate SHA-256 " + short(f.Shared.Signer) + "…"
		}
		return true, s
	}
	k := m.key(&f)
	m.mu.Lock()
	bl := m.builders[group(k)]
	m.mu.Unlock()
	switch {
	case k.Kernel == "":
		return false, "kernel unknown"
	case bl != "" && bl != f.Node.Name:
		return false, fmt.Sprintf("waits for node/%s to build tt-kmd %s for kernel %s", bl, m.version, k.Kernel)
	}
	return false, fmt.Sprintf("no module of tt-kmd %s is vouched for kernel %s yet: this node builds it", m.version, k.Kernel)
}

// build runs the group's kmd-build helper on the node, reads the module
// from its log and vouches for it. The node's claim ends with it, so a
// waiting node builds if this one could not.
func (m *moduleShare) build(ctx context.Context, b *builder, cfg *KMDConfig, f Facts, k ModuleKey) error {
	defer m.release(f.Node.Name)
	if bl := buildBlockers(cfg, f.Measured); len(bl) > 0 {
		return runbook.Blocked(fmt.Errorf("node %s was to build %s for its kernel group: %s", f.Node.Name, k, strings.Join(bl, "; ")))
	}
	spec := KMDBuildHelperSpec(cfg, f.Node.Name, k.Commit)
	name := kube.HelperName(kmdBuildTask, f.Node.Name, m.version)
	// An earlier attempt's helper of this spec is adopted: one that
	// succeeded is read again, one that failed is replaced.
	for attempt := 0; ; attempt++ {
		pod, created, err := kube.EnsureHelper(ctx, b.cs, b.rec, spec)
		if err != nil {
			var foreign *kube.ForeignHelperError
			if errors.As(err, &foreign) {
				return runbook.Blocked(err)
			}
			return err
		}
		if h := helperOf(pod); created || attempt > 0 || !h.finished() || h.ok() {
			break
		}
		if err := deleteHelper(ctx, b.cs, b.rec, pod); err != nil {
			return err
		}
	}
	h, err := waitHelper(ctx, b.cs, b.helperNS, name, helperFacts{})
	if err != nil {
		if h.Pod != nil {
			b.dropHelper(ctx, h.Pod)
			return runbook.Blocked(err)
		}
		return err
	}
	h = trusted(h, spec)
	if !h.ok() || h.Result.Module == nil {
		b.rec.Record(ctx, kube.NodeRef(f.Node), true, "KMDBuildFailed", helperError(h))
		return fmt.Errorf("building %s on node %s failed (the node is not taken out of service): %s", k, f.Node.Name, helperError(h))
	}
	if k.Commit == "" { // no probe listed the tag: the build pins what it checked out
		if err := m.pinCommit(ctx, f.Node, h.Result.Module.Commit, "checked out by node/"+f.Node.Name+"'s build"); err != nil {
			return err
		}
		k.Commit = m.pinned()
	}
	raw, err := readModule(ctx, b, h.Pod)
	if err == nil {
		_, err = m.vouch(ctx, f.Node, k, raw, *h.Result.Module)
	}
	if err != nil {
		b.rec.Record(ctx, kube.NodeRef(f.Node), true, "KMDModuleRefused", err.Error())
		return err
	}
	b.dropHelper(ctx, h.Pod)
	return nil
}

// buildBlockers: what stops a node from building the module for its kernel.
func buildBlockers(cfg *KMDConfig, r *ProbeRecord) []string {
	if r == nil {
		return []string{"no probe result"}
	}
	switch {
	case !r.Headers:
		return []string{fmt.Sprintf("tt-kmd %s cannot be built here for kernel %s (no kernel headers); install linux-headers-%s "+
			"on the node", cfg.Version, r.Kernel, r.Kernel)}
	case !r.Toolchain && r.CC != "":
		return []string{fmt.Sprintf("tt-kmd %s cannot be built here for kernel %s: its headers say it was built with the compiler %s "+
			"(kernel config, or Debian's .kernelvariables), which the node lacks, or make is missing; install %s and make on the node",
			cfg.Version, r.Kernel, r.CC, r.CC)}
	case !r.Toolchain:
		return []string{fmt.Sprintf("tt-kmd %s cannot be built here for kernel %s (no make or gcc); install build-essential on "+
			"the node", cfg.Version, r.Kernel)}
	}
	return nil
}

// readModule reads the module a kmd-build helper printed in its log. A log
// that is not served yet just after the pod ended is read again, briefly.
func readModule(ctx context.Context, b *builder, pod *corev1.Pod) ([]byte, error) {
	limit := int64(4 * nodeagent.MaxModuleSize)
	var last error
	for attempt := range 5 {
		raw, err := b.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: pod.Spec.Containers[0].Name,
			LimitBytes: &limit}).DoRaw(ctx)
		if err == nil {
			gz, ferr := nodeagent.ReadModuleFrame(raw)
			if ferr == nil {
				return nodeagent.Gunzip(gz)
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
	return nil, errors.Join(errors.New("cannot read the module from the kmd-build helper's log"), last)
}
