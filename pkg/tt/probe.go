package tt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ttkmd"
	"github.com/rollbook/rollbook/pkg/version"
)

// AnnProbe is the last probe of the node (JSON ProbeRecord).
const AnnProbe = "rollbook.dev/tt-probe"

// ProbeRecord is what a probe helper measured, kept on the node.
type ProbeRecord struct {
	Run    string    `json:"run"`
	At     time.Time `json:"at"`
	Kernel string    `json:"kernel"`
	// KernelBuild is the running kernel's build (uname -v): with Kernel,
	// the kernel group a module is built once for.
	KernelBuild string `json:"kernelBuild,omitempty"`
	// KernelConfig is the running kernel's config digest: release, build
	// and config are the kernel group a shared module serves.
	KernelConfig string              `json:"kernelConfig,omitempty"`
	KMD          string              `json:"kmd,omitempty"`
	DKMS         []string            `json:"dkms,omitempty"`
	Headers      bool                `json:"headers"`
	Toolchain    bool                `json:"toolchain"`
	Cached       bool                `json:"cached,omitempty"`
	SMI          string              `json:"smi,omitempty"`
	AgentVersion string              `json:"agentVersion,omitempty"`
	Firmware     []string            `json:"firmware,omitempty"`
	Boards       []string            `json:"boards,omitempty"` // per device, as Firmware
	Holders      []nodeagent.Holder  `json:"holders,omitempty"`
	CC           string              `json:"cc,omitempty"`
	LoadRefused  string              `json:"loadRefused,omitempty"`
	Tag          *nodeagent.TagCheck `json:"tag,omitempty"`
	PCIDevices   *int                `json:"pciDevices,omitempty"`
	BoundDevices int                 `json:"boundDevices,omitempty"`
	// SilentDevices: see nodeagent.ProbeFacts.
	SilentDevices []int `json:"silentDevices,omitempty"`
	// PCIChips: see nodeagent.ProbeFacts.
	PCIChips map[string]int `json:"pciChips,omitempty"`
	// SignatureRequired: see nodeagent.ProbeFacts.
	SignatureRequired bool `json:"signatureRequired,omitempty"`
	// Kernels are the installed kernels besides the running one.
	Kernels []nodeagent.KernelFacts `json:"kernels,omitempty"`
	// Bundle is the firmware bundle upgrade firmware would flash, as read
	// on the node.
	Bundle *nodeagent.BundleFacts `json:"bundle,omitempty"`
	// SMIOnPath: see nodeagent.ProbeFacts.
	SMIOnPath []nodeagent.HostSMI `json:"smiOnPath,omitempty"`
	// LoadedSrcVersion, LoadedCommit: see nodeagent.ProbeFacts.
	LoadedSrcVersion string `json:"loadedSrcVersion,omitempty"`
	LoadedCommit     string `json:"loadedCommit,omitempty"`
}

func probeRecordOf(n *corev1.Node) *ProbeRecord {
	raw, ok := n.Annotations[AnnProbe]
	if !ok {
		return nil
	}
	var r ProbeRecord
	if decodeRecord(raw, &r) != nil {
		return nil
	}
	return &r
}

func probeRecord(r *nodeagent.Result, run string, at time.Time) ProbeRecord {
	rec := ProbeRecord{Run: run, At: at.UTC().Truncate(time.Second), Kernel: r.Kernel, KernelBuild: r.KernelBuild,
		KernelConfig: r.KernelConfig, KMD: r.Before, Holders: r.Holders}
	if p := r.Probe; p != nil {
		rec.DKMS, rec.Headers, rec.Toolchain, rec.Cached, rec.SMI, rec.AgentVersion = p.DKMS, p.Headers, p.Toolchain, p.Cached, p.SMI,
			p.AgentVersion
		rec.CC, rec.LoadRefused, rec.Tag, rec.PCIDevices, rec.BoundDevices = p.CC, p.LoadRefused, p.Tag, p.PCIDevices, p.BoundDevices
		rec.SilentDevices, rec.PCIChips = p.SilentDevices, p.PCIChips
		rec.SignatureRequired, rec.Kernels, rec.Bundle = p.SignatureRequired, p.Kernels, p.Bundle
		rec.SMIOnPath, rec.LoadedSrcVersion, rec.LoadedCommit = p.SMIOnPath, p.LoadedSrcVersion, p.LoadedCommit
	}
	for _, d := range r.Devices {
		rec.Firmware = append(rec.Firmware, d.Before)
		rec.Boards = append(rec.Boards, d.Board)
	}
	return rec
}

// hostHolders are the measured holders that are not in any pod: no drain
// moves them.
func (r *ProbeRecord) hostHolders() []nodeagent.Holder {
	var out []nodeagent.Holder
	for _, h := range r.Holders {
		if h.PodUID == "" {
			out = append(out, h)
		}
	}
	return out
}

// commonBlockers stop any disruptive tt work on a node before its cordon.
func (r *ProbeRecord) commonBlockers(forceUnload bool) []string {
	var out []string
	if v := version.Get().Version; r.AgentVersion != "" && v != "devel" && r.AgentVersion != "devel" && r.AgentVersion != v {
		out = append(out, fmt.Sprintf("the helper image runs node-agent %s, this kubectl-tt is %s; use --helper-image of the same release",
			r.AgentVersion, v))
	}
	if hh := r.hostHolders(); len(hh) > 0 && !forceUnload {
		var s []string
		for _, h := range hh {
			s = append(s, fmt.Sprintf("pid %d (%s%s)", h.PID, h.Comm, heldHow(h)))
		}
		out = append(out, "host processes outside Kubernetes hold /dev/tenstorrent: "+strings.Join(s, ", ")+
			"; stop them, or re-run with --force-unload to kill them (their work is lost)")
	}
	return out
}

// measuredFresh reports a probe taken by this run.
func (f *Facts) measuredFresh(run string) bool { return f.Measured != nil && f.Measured.Run == run }

// probeBudget bounds a probe helper, from its creation to its result.
const probeBudget = 5 * time.Minute

// probeStep runs `node-agent probe` on the node before anything disruptive
// and records what it measured; blockers decides what stops the node.
func (b *builder) probe(id string, cmd []string, blockers func(*Facts) []string) runbook.Step[Facts] {
	name := func(node string) string { return probeHelperName(node, b.run) }
	spec := func(node string) kube.HelperSpec { return probeSpec(b.helper, node, b.run, cmd) }
	return runbook.Step[Facts]{
		ID: id, Title: "Probe the node",
		Reads: readNode | readPods,
		Doc: "Before the first cordon, run a short helper pod (node-agent probe) with the same image and namespace as the real " +
			"task, unprivileged and with the host mounted read-only. It proves the image pulls and runs, and measures the kernel, " +
			"DKMS state, headers and the compiler they name, whether the kernel loads unsigned modules, the cards on the " +
			"PCI bus, the loaded module, firmware, tt-smi and every process holding the device, and for tt-kmd (when it " +
			"would be built) the release's tag at the git URL. Anything that would fail the task " +
			"stops the node here, before it is taken out of service.",
		// No step clock (two node writes): a probe changes nothing, so a
		// re-run may start its budget afresh; Wait bounds it.
		Guards: []runbook.Guard[Facts]{{
			Name: "the node is not excluded",
			Check: func(f Facts) (bool, string) {
				return f.Skip == "", fmt.Sprintf("node %s became excluded after the run started (%s); it is left alone", f.Node.Name,
					f.Skip)
			},
		}},
		Done: func(f Facts) (bool, string) {
			switch {
			case f.Finished:
				return true, "already measured at the target"
			case f.ourCordon() && f.Measured != nil:
				// One whose record is gone is probed again: the steps on
				// decide on it, and a probe changes nothing.
				return true, "node already in progress"
			case f.measuredFresh(b.run) && f.Probe.Pod == nil:
				if bl := blockers(&f); len(bl) > 0 {
					return true, "probe found: " + strings.Join(bl, "; ")
				}
				return true, describeProbe(f.Measured)
			}
			return false, "not probed by this run"
		},
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "pod/" + b.helperNS + "/" + name(f.Node.Name), Action: "create",
				Detail: strings.Join(cmd[1:], " ")}}
		},
		Act: func(ctx context.Context, f Facts) error {
			if probe := trusted(f.Probe, spec(f.Node.Name)); probe.finished() {
				if probe.ok() {
					return b.recordProbe(ctx, f.Node, probe)
				}
				if err := deleteHelper(ctx, b.cs, b.rec, probe.Pod); err != nil {
					return err
				}
			}
			// A killed run's probe is named after that run: nobody else removes it.
			if err := b.removeOtherRunsProbes(ctx, f); err != nil {
				return err
			}
			if _, _, err := kube.EnsureHelper(ctx, b.cs, b.rec, spec(f.Node.Name)); err != nil {
				if ctx.Err() != nil || runbook.IsTransient(err) {
					// A dropped answer says nothing of the namespace or the
					// admission: observed again, the helper may be there.
					return err
				}
				return runbook.Blocked(fmt.Errorf("cannot start the probe helper on %s (is namespace %q there, and may it run "+
					"privileged pods?): %w; the node was not cordoned", f.Node.Name, b.helperNS, err))
			}
			return nil
		},
		Wait: func(ctx context.Context, f Facts) error {
			ctx, cancel := context.WithTimeoutCause(ctx, probeBudget,
				fmt.Errorf("the probe on %s did not finish within %s", f.Node.Name, probeBudget))
			defer cancel()
			replaced := trusted(f.Probe, spec(f.Node.Name)) // a failed probe was replaced; a finished good one was not
			if replaced.ok() {
				replaced = helperFacts{}
			}
			h, err := waitHelper(ctx, b.cs, b.helperNS, name(f.Node.Name), replaced)
			if err != nil {
				if h.Pod != nil { // never started: nothing to keep
					b.dropHelper(ctx, h.Pod)
				}
				return runbook.Blocked(fmt.Errorf("probe on %s: %w%s; the node was not cordoned", f.Node.Name, err,
					platformHint(f.Node, startFailure(h.Pod))))
			}
			if h = trusted(h, spec(f.Node.Name)); !h.ok() {
				return runbook.Blocked(fmt.Errorf("probe on %s failed: %s; the node was not cordoned", f.Node.Name, helperError(h)))
			}
			return b.recordProbe(ctx, f.Node, h)
		},
	}
}

func (b *builder) recordProbe(ctx context.Context, n *corev1.Node, h helperFacts) error {
	rec := probeRecord(h.Result, b.run, kube.ServerNow())
	raw, _ := json.Marshal(rec)
	s := string(raw)
	change := kube.NodeChange{Annotations: map[string]*string{AnnProbe: &s}}
	if len(rec.DKMS) > 0 && n.Labels[LabelInstallMode] != InstallModeHost {
		// The operator's contract: DKMS nodes say so, and driver work skips them.
		change.Labels = map[string]*string{LabelInstallMode: ptr.To(InstallModeHost)}
		b.rec.Record(ctx, kube.NodeRef(n), true, "HostManagedKMD", "probe found a DKMS install; labelled "+LabelInstallMode+"=host")
	}
	if _, err := kube.SetNodeKeys(ctx, b.cs, n.Name, change); err != nil {
		return err
	}
	return deleteHelper(ctx, b.cs, b.rec, h.Pod)
}

func probeHelperName(node, run string) string { return kube.HelperName("probe", node, run) }

// probeSpec is the probe helper a run creates on node.
func probeSpec(h HelperConfig, node, run string, cmd []string) kube.HelperSpec {
	s := helperSpec(h, "probe", node, run, cmd, false, run)
	s.Deadline = probeBudget
	return s
}

func describeProbe(r *ProbeRecord) string {
	s := fmt.Sprintf("kernel %s, kmd %s, %d holder(s)", r.Kernel, orUnknown(r.KMD), len(r.Holders))
	if r.PCIDevices != nil && r.KMD != "" && r.BoundDevices != *r.PCIDevices {
		s += fmt.Sprintf("; the module serves %d of %d Tenstorrent PCI device(s)", r.BoundDevices, *r.PCIDevices)
	}
	return s
}

// undriven is the blocker of a node with a card the tt-kmd version's id
// table does not bind (ttkmd.Drives): the swap would leave it without a
// driver, found by the device check after the drain.
func (r *ProbeRecord) undriven(version string) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(r.PCIChips)) {
		if ok, why := ttkmd.Drives(version, id); !ok {
			name := ttkmd.ChipName(id)
			if name == "" {
				name = "unknown chip"
			}
			out = append(out, fmt.Sprintf("tt-kmd %s would leave %d card(s) of the node (%s, 1e52:%s) without a driver: %s; "+
				"choose a version that drives every card of the node, or take the node out of the selection", version,
				r.PCIChips[id], name, strings.TrimPrefix(id, "0x"), why))
		}
	}
	return out
}

// cardsNotServing is the blocker of a node whose Tenstorrent cards are not
// on the PCI bus, or whose firmware does not answer the loaded tt-kmd:
// no driver or firmware work can be verified there, and the node is not
// done even at the target version.
func (r *ProbeRecord) cardsNotServing() []string {
	if r.PCIDevices != nil && *r.PCIDevices == 0 {
		return []string{"no Tenstorrent PCI device (vendor 0x1e52) under /sys/bus/pci/devices: the card is gone or the kernel " +
			"does not see it (check `lspci -d 1e52:` on the node); reseat or replace it, or take the node out of the selection"}
	}
	if len(r.SilentDevices) == 0 {
		return nil
	}
	var devs []string
	for _, n := range r.SilentDevices {
		devs = append(devs, fmt.Sprintf("/dev/tenstorrent/%d", n))
	}
	return []string{fmt.Sprintf("%s: the card does not answer tt-kmd %s (its hardware init failed: no firmware telemetry in "+
		"/sys/class/tenstorrent), so neither a module swap nor a flash could be verified; reset it (tt-smi -r on the node), "+
		"reseat or replace it, then re-run", strings.Join(devs, ", "), orUnknown(r.KMD))}
}

// waitHelper watches a helper until it ends, and notices within seconds a
// helper that cannot start (image pull, bad config, a NotReady node)
// instead of waiting for its deadline.
func waitHelper(ctx context.Context, cs kubernetes.Interface, ns, name string, replaced helperFacts) (helperFacts, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var seen atomic.Pointer[corev1.Pod] // the helper as the watch last saw it
	go watchNodeDown(ctx, cancel, cs, seen.Load)
	var old types.UID // a finished helper the step replaced: its late events are not the new one's
	if replaced.finished() {
		old = replaced.Pod.UID
	}
	p, err := kube.WaitForPodReplacing(ctx, cs, ns, name, old, func(p *corev1.Pod) bool {
		seen.Store(p)
		return kube.PodTerminal(p) || startFailure(p) != ""
	})
	if err != nil {
		if nd, ok := asNodeDown(ctx); ok {
			p, gerr := cs.CoreV1().Pods(ns).Get(context.WithoutCancel(ctx), name, metav1.GetOptions{})
			if gerr != nil {
				return helperFacts{}, nd
			}
			return helperFacts{Pod: p}, fmt.Errorf("%w and helper pod %s/%s has not started on it; bring the node back "+
				"(or take it out of the selection) and run the same command again", nd, ns, name)
		}
		if errors.Is(err, kube.ErrGone) {
			// Not by this run: maybe deliberately, to stop it, so it is not
			// started again without being asked.
			return helperFacts{}, fmt.Errorf("helper pod %s/%s was deleted before it finished, not by this run; "+
				"re-run the same command to start it again: %w", ns, name, err)
		}
		return helperFacts{}, err
	}
	if why := startFailure(p); why != "" && !kube.PodTerminal(p) {
		return helperFacts{Pod: p}, fmt.Errorf("helper pod %s/%s cannot start: %s (check --helper-image)", ns, name, why)
	}
	return helperOf(p), nil
}

// platformHint explains a helper that could not start on a node of another
// platform than the release image's: the pull of an image without the
// node's platform fails as any missing image does ("no match for platform
// in manifest"), and the node's own labels say which one it needed. Empty
// when the helper did not fail to start, or the node's platform is the
// release's or unknown.
func platformHint(n *corev1.Node, startFailed string) string {
	if n == nil || startFailed == "" {
		return ""
	}
	goos, arch := n.Labels[corev1.LabelOSStable], n.Labels[corev1.LabelArchStable]
	if goos == "" || arch == "" || goos == version.HelperOS && arch == version.HelperArch {
		return ""
	}
	return fmt.Sprintf("; node %s is %s/%s, and rollbook's release helper image is built for %s only: leave the node "+
		"out of the selection, or pass --helper-image an image built for %s/%s (and have the cluster admin allow its "+
		"digest in the helper policy)", n.Name, goos, arch, version.HelperOS+"/"+version.HelperArch, goos, arch)
}

// startFailure names a waiting reason a kubelet does not recover from by
// itself.
func startFailure(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	for _, c := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := c.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError":
				return w.Reason + ": " + w.Message
			}
		}
	}
	return ""
}

// ProbeRunbookName names the on-demand probe (`kubectl tt status --probe`).
const ProbeRunbookName = "tt-probe"

// ProbeRunbook measures every node again without changing it (no cordon):
// what `kubectl tt status --probe` runs before it shows label vs measured.
func ProbeRunbook(cs kubernetes.Interface, rec kube.Recorder, h HelperConfig, run string) *runbook.Runbook[Facts] {
	cs = kube.RememberNodeWrites(cs)
	name := func(node string) string { return probeHelperName(node, run) }
	obs := observer{cs: cs, owner: ProbeRunbookName, helperNS: h.Namespace, probe: name,
		finished: func(*corev1.Node) bool { return false }}
	b := newBuilder(cs, rec, run, h)
	return &runbook.Runbook[Facts]{
		Name:  ProbeRunbookName,
		Title: "Measure Tenstorrent nodes",
		Doc: `Per node: run the probe helper and record what it measured (kernel, module, DKMS, headers,
firmware, tt-smi, device holders). Nothing on the node changes and nothing is cordoned.`,
		Observe:      func(ctx context.Context, t runbook.Target) (Facts, error) { return obs.observe(ctx, t.Name()) },
		ObserveParts: obs.observePartsOf,
		Annotation:   annotationOf,
		Steps: []runbook.Step[Facts]{
			b.probe("tt.probe.measure", agentCommand("probe"), func(*Facts) []string { return nil }),
		},
	}
}

// ProbeTargets are the selected nodes, skip labels or not: measuring
// changes nothing.
func ProbeTargets(ctx context.Context, cs kubernetes.Interface, sel Selection) ([]runbook.Target, error) {
	nodes, err := ListNodes(ctx, cs, sel)
	if err != nil {
		return nil, err
	}
	if err := sel.checkAccess(nodes, nil); err != nil {
		return nil, err
	}
	out := make([]runbook.Target, 0, len(nodes))
	for i := range nodes {
		out = append(out, runbook.NodeTarget{Client: cs, Node: nodes[i].Name})
	}
	return out, nil
}

// measuredDisagrees says where the node's labels and its last probe differ,
// when the probe is newer than the recorded results; "" when they agree.
func measuredDisagrees(rec *nodeRecords) string {
	n, p := rec.n, rec.Probe()
	if p == nil {
		return ""
	}
	var out []string
	if label := n.Labels[LabelKMDVersion]; label != "" && label != p.KMD && !kmdRecordNewer(rec, p) {
		out = append(out, fmt.Sprintf("kmd label %s, measured %s", label, orUnknown(p.KMD)))
	}
	if label := n.Labels[LabelFirmware]; label != "" && len(p.Firmware) > 0 && !allAt(p.Firmware, label) {
		if r, ok := rec.Firmware(); !ok || !r.At.After(p.At) {
			out = append(out, fmt.Sprintf("firmware label %s, measured %s", label, strings.Join(p.Firmware, ",")))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "label and measurement disagree (probe " + p.At.Format(time.RFC3339) + "): " + strings.Join(out, "; ")
}

// kmdRecordNewer: the node's kmd result is newer than probe p. Both are
// kept to the second: within one, the result of p's own run came after it.
func kmdRecordNewer(rec *nodeRecords, p *ProbeRecord) bool {
	r, ok := rec.KMD()
	if !ok {
		return false
	}
	at, err := time.Parse(time.RFC3339, r.At)
	return err == nil && (at.After(p.At) || (at.Equal(p.At) && r.Run == p.Run))
}
