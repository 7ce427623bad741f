package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// Finding is one blocker preflight found: a node (or "" for the cluster),
// a stable check name, and one line saying what and how to fix it.
type Finding struct {
	Node    string `json:"node,omitempty"`
	Check   string `json:"check"`
	Message string `json:"message"`
}

// The checks a Finding names (stable: -o json carries them).
const (
	CheckDriverOperator   = "driver-operator"   // tt-k8s-driver-manager's DaemonSet manages tt-kmd
	CheckFirmwareOperator = "firmware-operator" // a TenstorrentFirmwarePolicy or its Job claims the node
	CheckExcluded         = "excluded"          // skip label, host-managed (DKMS)
	CheckProbe            = "probe"             // what the probe measured would fail the task
	CheckProbeFailed      = "probe-failed"      // the probe helper did not run or report
	CheckPDB              = "pdb"               // a pod the drain evicts is held by a PDB allowing no disruption
	CheckBarePod          = "bare-pod"          // a pod without a controller the drain would delete
	CheckLocalData        = "local-data"        // a pod whose emptyDir data the drain would delete
	CheckInstall          = "install"           // the policy and roles are missing or from another version (a warning)
)

// Preflight is what one upgrade would check before its cordons: the same
// functions its runbook calls (blockers, skip), so preflight and upgrade
// never disagree.
type Preflight struct {
	Component string // kmd, smi, firmware
	Helper    HelperConfig
	// ProbeCmd is the probe helper's command, nil when the task needs no
	// probe (smi: no cordon).
	ProbeCmd []string
	Blockers func(*Facts) []string
	Skip     func(*corev1.Node) string
	// Drain: pods are evicted (evicts decides which).
	Drain   bool
	evicts  func(f *Facts, p *corev1.Pod) bool
	version string // kmd: at the target nothing is drained
	// Operators reads the firmware operator's claims (firmware only).
	Operators bool
}

// KMDPreflight is upgrade kmd's checks.
func KMDPreflight(c *KMDConfig) Preflight {
	return Preflight{Component: "kmd", Helper: c.Helper, ProbeCmd: kmdProbeCommand(c), Blockers: kmdBlockers(c),
		Skip: DriverSkipReason, Drain: c.Drain, evicts: kmdEvicts(c), version: c.Version}
}

// kmdEvicts: the pods upgrade kmd's drain evicts from a node not at the
// target (at the target only the label is written).
func kmdEvicts(c *KMDConfig) func(f *Facts, p *corev1.Pod) bool {
	return func(f *Facts, p *corev1.Pod) bool {
		return holdReason(p, f.measuredHolders()) != "" || (c.FullNode && c.drainSelects(p))
	}
}

// FirmwarePreflight is upgrade firmware's checks.
func FirmwarePreflight(c *FirmwareConfig) Preflight {
	return Preflight{Component: "firmware", Helper: c.Helper, ProbeCmd: fwProbeCommand(c),
		Blockers: fwBlockers(c), Skip: FirmwareSkipReason, Drain: c.Drain, Operators: true, evicts: fwEvicts}
}

// fwEvicts: the firmware drain evicts the device's holders only.
func fwEvicts(f *Facts, p *corev1.Pod) bool { return holdReason(p, f.measuredHolders()) != "" }

// barePodPrefix begins every bare-pod blocker (preflight names its check).
const barePodPrefix = "bare pod "

// barePodBlockers are the pods without a controller the drain would meet
// (evicts): it refuses them, nothing would recreate them, unless --force.
// Knowable before the cordon from the pods already read.
func barePodBlockers(f *Facts, evicts func(*Facts, *corev1.Pod) bool, force bool) []string {
	if force {
		return nil
	}
	var out []string
	for i := range f.Pods {
		p := &f.Pods[i]
		if !kube.Evictable(p) || metav1.GetControllerOf(p) != nil || !evicts(f, p) {
			continue
		}
		s := barePodPrefix + p.Namespace + "/" + p.Name
		if why := holdReason(p, f.measuredHolders()); why != "" {
			s += " (" + why + ")"
		}
		out = append(out, s+" has no controller: the drain does not delete it (nothing would recreate it); move or delete it, "+
			"or re-run with --force to evict it for good")
	}
	sort.Strings(out)
	return out
}

// localDataPrefix begins every emptyDir blocker (preflight names its check).
const localDataPrefix = "pod with local data "

// localDataBlockers are the pods with emptyDir volumes the drain would
// evict (evicts): their data is deleted with them, so, as kubectl drain,
// it refuses them unless --delete-emptydir-data. Knowable before the
// cordon from the pods already read.
func localDataBlockers(f *Facts, evicts func(*Facts, *corev1.Pod) bool, deleteEmptyDirData bool) []string {
	if deleteEmptyDirData {
		return nil
	}
	var out []string
	for i := range f.Pods {
		p := &f.Pods[i]
		if !kube.Evictable(p) || !kube.HasLocalData(p) || !evicts(f, p) {
			continue
		}
		out = append(out, localDataPrefix+p.Namespace+"/"+p.Name+" has emptyDir volumes: the drain would delete their data "+
			"with the pod; move the data, or re-run with --delete-emptydir-data to evict it anyway")
	}
	sort.Strings(out)
	return out
}

// SMIPreflight is upgrade smi's checks: no cordon, so only what excludes a
// node.
func SMIPreflight(c *SMIConfig) Preflight {
	return Preflight{Component: "smi", Helper: c.Helper, Skip: DriverSkipReason}
}

// PreflightReport is every finding, per node in node order.
type PreflightReport struct {
	Component string    `json:"component"`
	Nodes     []string  `json:"nodes"`
	Findings  []Finding `json:"findings"`
	// Warnings block nothing but should be read (an install from another
	// version).
	Warnings []Finding `json:"warnings,omitempty"`
}

// BlockedNodes counts the nodes with a finding (a cluster-wide finding
// blocks them all).
func (r *PreflightReport) BlockedNodes() int {
	seen := map[string]bool{}
	for _, f := range r.Findings {
		if f.Node == "" {
			return len(r.Nodes)
		}
		seen[f.Node] = true
	}
	return len(seen)
}

// preflightParallel bounds the probes at once: each is a short pod.
const preflightParallel = 8

// RunPreflight checks every selected node without changing any: no
// cordon, no label or annotation; only the read-only probe helper pod
// runs (and is deleted), as upgrade's probe step does. run names the
// helpers.
func RunPreflight(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, p Preflight, sel Selection,
	run string) (*PreflightReport, error) {
	nodes, err := ListNodes(ctx, cs, sel)
	if err != nil {
		return nil, err
	}
	if p.ProbeCmd != nil {
		if err := sel.checkAccess(nodes, p.Skip); err != nil {
			return nil, err
		}
	}
	rep := &PreflightReport{Component: p.Component, Findings: []Finding{}}
	if err := CheckNoOperator(ctx, cs); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, err
		}
		rep.Findings = append(rep.Findings, Finding{Check: CheckDriverOperator, Message: err.Error()})
	}
	var claims OperatorClaims
	if p.Operators {
		if claims, err = ReadFirmwareOperatorClaims(ctx, cs, dyn, nodes); err != nil {
			return nil, err
		}
	}
	per := make([][]Finding, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	slots := make(chan struct{}, preflightParallel)
	for i := range nodes {
		rep.Nodes = append(rep.Nodes, nodes[i].Name)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			per[i], errs[i] = p.node(ctx, cs, &nodes[i], claims, run)
		}(i)
	}
	wg.Wait()
	for i := range nodes {
		if errs[i] != nil {
			return nil, fmt.Errorf("node %s: %w", nodes[i].Name, errs[i])
		}
		rep.Findings = append(rep.Findings, per[i]...)
	}
	return rep, nil
}

// node is one node's findings.
func (p Preflight) node(ctx context.Context, cs kubernetes.Interface, n *corev1.Node, claims OperatorClaims,
	run string) ([]Finding, error) {
	var out []Finding
	add := func(check string, msgs ...string) {
		for _, m := range msgs {
			out = append(out, Finding{Node: n.Name, Check: check, Message: m})
		}
	}
	if why := p.Skip(n); why != "" {
		fix := "remove the label to include it"
		if n.Labels[LabelInstallMode] == InstallModeHost {
			fix = "it is upgraded on the host (DKMS), not by rollbook"
		}
		add(CheckExcluded, fmt.Sprintf("upgrade %s skips this node (%s); %s", p.Component, why, fix))
		return out, nil
	}
	add(CheckFirmwareOperator, claims[n.Name]...)
	if p.ProbeCmd == nil {
		return out, nil
	}
	f := Facts{Node: n}
	rec, err := p.probe(ctx, cs, n.Name, run)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		add(CheckProbeFailed, err.Error())
		return out, nil
	}
	f.Measured = rec
	if f.Pods, err = kube.PodsOnNode(ctx, cs, n.Name); err != nil {
		return nil, err
	}
	var tc templateCache
	o := observer{cs: cs, daemonSets: &tc, evicts: p.evicts}
	if err := o.readHolderTemplates(ctx, &f); err != nil {
		return nil, err
	}
	for _, b := range p.Blockers(&f) {
		switch {
		case strings.HasPrefix(b, barePodPrefix):
			add(CheckBarePod, b)
		case strings.HasPrefix(b, localDataPrefix):
			add(CheckLocalData, b)
		default:
			add(CheckProbe, b)
		}
	}
	atTarget := p.Component == "kmd" && f.Measured.KMD == p.version
	if p.Drain && !atTarget {
		// What the upgrade's cordon guards decide on (pdbGuards), read the same way.
		if err := o.readPDBs(ctx, &f, cordonReads{}); err != nil {
			return nil, err
		}
		bl := pdbBlocked(&f, p.evicts)
		add(CheckPDB, append(pdbMessages(bl, false), pdbMessages(bl, true)...)...)
	}
	return out, nil
}

// probe runs the read-only probe helper on node and returns what it
// measured; the pod is deleted after.
func (p Preflight) probe(ctx context.Context, cs kubernetes.Interface, node, run string) (*ProbeRecord, error) {
	spec := probeSpec(p.Helper, node, run, p.ProbeCmd)
	if _, _, err := kube.EnsureHelper(ctx, cs, noRecorder{}, spec); err != nil {
		return nil, fmt.Errorf("cannot start the probe helper (is namespace %q there, and may it run privileged pods?): %v",
			p.Helper.Namespace, err)
	}
	wctx, cancel := context.WithTimeoutCause(ctx, probeBudget, fmt.Errorf("the probe did not finish within %s", probeBudget))
	defer cancel()
	h, err := waitHelper(wctx, cs, p.Helper.Namespace, probeHelperName(node, run), helperFacts{})
	if h.Pod != nil || err != nil {
		// Ours, named after this run: nothing else removes it.
		_ = cs.CoreV1().Pods(p.Helper.Namespace).Delete(context.WithoutCancel(ctx), probeHelperName(node, run),
			metav1.DeleteOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("probe: %v", err)
	}
	if h = trusted(h, spec); !h.ok() {
		return nil, fmt.Errorf("probe failed: %s", helperError(h))
	}
	r := probeRecord(h.Result, run, kube.ServerNow())
	return &r, nil
}

type noRecorder struct{}

func (noRecorder) Record(context.Context, corev1.ObjectReference, bool, string, string) {}
