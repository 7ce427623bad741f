package tt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// measuredKMD is the module version measured on the node by this run:
// its kmd helper's recorded result, else its probe.
func measuredKMD(n *corev1.Node, run string) (string, bool) {
	if raw, ok := n.Annotations[AnnKMDResult]; ok {
		var r kmdRecord
		if json.Unmarshal([]byte(raw), &r) == nil && r.Run == run {
			return r.After, true
		}
	}
	if p := probeRecordOf(n); p != nil && p.Run == run {
		return p.KMD, true
	}
	return "", false
}

// kmdFinished: this run measured the target version on the node and its
// label says so. A label alone (set by hand, from intent, or left from
// before a reboot into another kernel) never counts: every run measures.
// A node whose cards are gone or silent is not done either: it is
// reported.
func kmdFinished(n *corev1.Node, want, run string) bool {
	if p := probeRecordOf(n); p != nil && p.Run == run {
		if len(p.cardsNotServing()) > 0 {
			return false
		}
		if len(p.kernelsToPersist(want)) > 0 && !kmdRecordOfRun(n, run) {
			return false // its helper persists the target for them first
		}
	}
	v, ok := measuredKMD(n, run)
	return ok && v == want && n.Labels[LabelKMDVersion] == want
}

// kmdRecordOfRun: the kmd helper of run reported on n (its record).
func kmdRecordOfRun(n *corev1.Node, run string) bool {
	var r kmdRecord
	raw, ok := n.Annotations[AnnKMDResult]
	return ok && json.Unmarshal([]byte(raw), &r) == nil && r.Run == run
}

// kernelsToPersist are, on a node the probe found running want, the
// installed kernels (not running) a boot into which would come back
// without it: headers and a toolchain there, want not persisted for them
// (a kernel installed after the last roll). A kmd helper given no vouched
// module persists them without a cordon: at the target it only builds and
// persists, and it can swap nothing (obtain-module refuses without
// --module-sha256). Not where only signed modules load: nodes never sign.
func (p *ProbeRecord) kernelsToPersist(want string) []string {
	if p == nil || want == "" || p.KMD != want || p.SignatureRequired {
		return nil
	}
	var out []string
	for _, k := range p.Kernels {
		if k.Headers && k.Toolchain && !k.Persisted {
			out = append(out, k.Release)
		}
	}
	return out
}

// kmdFailure turns a failed helper into a clear error: device holders and
// missing kernel headers need a person (blocked); the rest failed.
func kmdFailure(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, f Facts, h helperFacts) error {
	if h.Result == nil {
		return fmt.Errorf("helper %s failed without a result: %s", h.Pod.Name, h.ResultErr)
	}
	r := h.Result
	// Record what is really loaded now; the label must never lie.
	if r.After != "" {
		_, _ = kube.SetNodeKeys(ctx, cs, f.Node.Name, kube.NodeChange{Labels: map[string]*string{LabelKMDVersion: &r.After}})
	}
	rec.Record(ctx, kube.NodeRef(f.Node), true, "KMDUpgradeFailed", helperError(h))
	msg := fmt.Errorf("%s", helperError(h))
	if r.Error == nil {
		return msg
	}
	switch r.Error.Reason {
	case nodeagent.ReasonDeviceInUse, nodeagent.ReasonHoldersRemain:
		pods, _ := kube.PodsOnNode(ctx, cs, f.Node.Name)
		return runbook.Blocked(fmt.Errorf("%s\n%s\nStop those processes or drain their pods, "+
			"or re-run with --force-unload to kill them (their in-flight work is lost)",
			helperError(h), describeHolders(r.Holders, pods)))
	case nodeagent.ReasonNoKernelHeaders, nodeagent.ReasonHostManaged:
		return runbook.Blocked(msg)
	case nodeagent.ReasonDevicesUnbound:
		if r.Restored != "" && r.After == r.Restored {
			// The helper put the previous module back and verified it serves
			// the cards it served: the node is as before, so give it back.
			// It still failed; the run says so.
			return restoredNode(ctx, cs, rec, f, msg)
		}
	}
	return msg
}

// heldHow says how a holder holds the device when not by an open fd: from
// tt-kmd 2.10 a dma-buf or a mapping keeps it busy after close().
func heldHow(h nodeagent.Holder) string {
	switch h.Via {
	case nodeagent.HeldByDmaBuf:
		return ", through a tenstorrent dma-buf"
	case nodeagent.HeldByMmap:
		return ", through an mmap of the device"
	}
	return ""
}

// restoredNode reopens the deploy gates and lifts our cordon of a node the
// kmd helper restored to its previous, verified module, then returns err.
func restoredNode(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, f Facts, err error) error {
	if gerr := openGates(ctx, cs, rec, f.Node); gerr != nil {
		return fmt.Errorf("%w; reopening the deploy gates failed, the node stays cordoned: %v", err, gerr)
	}
	n, gerr := cs.CoreV1().Nodes().Get(ctx, f.Node.Name, metav1.GetOptions{})
	if gerr == nil {
		_, gerr = kube.UncordonNode(ctx, cs, rec, n, KMDRunbookName)
	}
	if gerr != nil {
		return fmt.Errorf("%w; uncordon failed, the node stays cordoned: %v", err, gerr)
	}
	// Not half-way any more: nothing for cleanup or a re-run to resume.
	if _, gerr := kube.SetNodeKeys(ctx, cs, f.Node.Name, kube.NodeChange{
		Annotations: map[string]*string{runbook.TimerKey(KMDRunbookName): nil}}); gerr != nil {
		return fmt.Errorf("%w; uncordoned, but its step clock stays: %v", err, gerr)
	}
	return fmt.Errorf("%w (previous module restored: node uncordoned, deploy gates reopened)", err)
}

func describeHolders(holders []nodeagent.Holder, pods []corev1.Pod) string {
	byUID := map[string]string{}
	for _, p := range pods {
		byUID[string(p.UID)] = p.Namespace + "/" + p.Name
	}
	var lines []string
	for _, h := range holders {
		owner := "a host process (no pod)"
		if h.PodUID != "" {
			owner = "pod uid " + h.PodUID
			if n, ok := byUID[h.PodUID]; ok {
				owner = "pod " + n
			}
		}
		lines = append(lines, fmt.Sprintf("  holder pid %d (%s%s): %s", h.PID, h.Comm, heldHow(h), owner))
	}
	return strings.Join(lines, "\n")
}

func describeKMDResult(r *nodeagent.Result) string {
	s := fmt.Sprintf("helper measured %s (was %s", r.After, orUnknown(r.Before))
	if r.Commit != "" {
		s += ", commit " + r.Commit[:12]
	}
	if m := r.Module; m != nil && m.SHA256 != "" {
		s += ", module " + short(m.SHA256) + "… built by " + orUnknown(m.BuiltBy)
		if r.CacheHit != nil && *r.CacheHit {
			s += ", from the node's cache"
		}
	}
	s += ")"
	if !r.Persisted {
		// The driver runs, but a reboot would come back without it: say so
		// on the node's event and in the step's line.
		s += "; NOT reboot-persistent"
	}
	if len(r.PersistedKernels) > 1 {
		s += "; boots with it on kernels " + strings.Join(r.PersistedKernels, ", ")
	}
	if len(r.Warnings) > 0 {
		s += "; helper warnings: " + strings.Join(r.Warnings, "; ")
	}
	return s
}

// kmdRecord is the compact result kept on the node.
type kmdRecord struct {
	Before   string `json:"before,omitempty"`
	After    string `json:"after"`
	Kernel   string `json:"kernel,omitempty"`
	Commit   string `json:"commit,omitempty"`
	CacheHit *bool  `json:"cacheHit,omitempty"`
	// Module is the SHA-256 of the module loaded (the one kubectl tt
	// vouched for), BuiltBy the node that built it.
	Module    string `json:"module,omitempty"`
	BuiltBy   string `json:"builtBy,omitempty"`
	Persisted bool   `json:"persisted"`
	// Kernels are those whose boot loads After (the running one when
	// persisted, and the other installed kernels built for): status
	// compares them with the kernel the node reports.
	Kernels  []string `json:"kernels,omitempty"`
	Duration int64    `json:"durationMs"`
	Run      string   `json:"run"`
	At       string   `json:"at"`
}

// kmdResultChange is the write that records helper result r on node, and
// the KMDUpgraded Event's message.
func kmdResultChange(node *corev1.Node, r *nodeagent.Result, run string) (kube.NodeChange, string) {
	mode := r.InstallMode
	if mode == "" {
		mode = InstallModeContainer
	}
	rec := kmdRecord{Before: r.Before, After: r.After, Kernel: r.Kernel, Commit: r.Commit, CacheHit: r.CacheHit,
		Persisted: r.Persisted, Kernels: r.PersistedKernels, Duration: r.DurationMS, Run: run,
		At: kube.ServerNow().UTC().Format(time.RFC3339)}
	if m := r.Module; m != nil {
		rec.Module, rec.BuiltBy = m.SHA256, m.BuiltBy
	}
	b, _ := json.Marshal(rec)
	return kube.NodeChange{
		Labels:      map[string]*string{LabelKMDVersion: &r.After, LabelInstallMode: &mode},
		Annotations: withClockTakenAlong(node, KMDRunbookName, map[string]*string{AnnKMDResult: ptr.To(string(b))}),
	}, fmt.Sprintf("%s=%s (%s)", LabelKMDVersion, r.After, describeKMDResult(r))
}
