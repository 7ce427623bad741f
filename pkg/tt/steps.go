package tt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// builder makes the steps every tt node runbook shares, over Facts.
type builder struct {
	cs       kubernetes.Interface
	rec      kube.Recorder
	run      string
	helper   HelperConfig
	helperNS string
}

func newBuilder(cs kubernetes.Interface, rec kube.Recorder, run string, h HelperConfig) *builder {
	return &builder{cs: cs, rec: rec, run: run, helper: h, helperNS: h.Namespace}
}

// workNotes tells a person what a stopped run left behind on the node.
func workNotes(f Facts) []string {
	var notes []string
	if f.ourCordon() {
		notes = append(notes, fmt.Sprintf("node %s is still cordoned by rollbook %s; re-run the same command to continue, "+
			"or `kubectl uncordon %s` to give up", f.Node.Name, f.Owner, f.Node.Name))
	}
	if f.gatesPriorRecorded() {
		notes = append(notes, "deploy-gate labels are set to \"false\" on this node until the run finishes")
	}
	return notes
}

func annotationOf(f Facts, key string) (string, bool) { v, ok := f.Node.Annotations[key]; return v, ok }

// foreignCordon explains a cordon this runbook may not take over: someone
// else's, or another rollbook runbook's.
func foreignCordon(f *Facts) (bool, string) {
	st := kube.CordonStateOf(f.Node)
	switch {
	case st.Foreign():
		return false, fmt.Sprintf("node %s was cordoned by someone else; rollbook will not take over a cordon it did not set. "+
			"Uncordon it first if it may be upgraded", f.Node.Name)
	case st.Cordoned && st.Owner != "" && st.Owner != f.Owner:
		return false, fmt.Sprintf("node %s is cordoned by rollbook %s (run %s); let that runbook finish first (re-run it), "+
			"or uncordon the node to give it up", f.Node.Name, st.Owner, orUnknown(st.Run))
	}
	return true, ""
}

// cordon is the cordon step; its write also closes gates, the deploy gates
// the close-gates step after it closes (cordonClosingGates).
func (b *builder) cordon(id string, gates []string, guards ...runbook.Guard[Facts]) runbook.Step[Facts] {
	return runbook.Step[Facts]{
		ID: id, Title: "Cordon the node",
		Reads: readNode | readOthersOut | readPDBs,
		// The observation after it serves the drain's first step: the
		// close-gates step between has nothing left to write.
		DoneReads: readNode | readPods,
		// The --max-parallel budget is shared by the run's targets: decide
		// it one cordon at a time (see runbook.Step.Exclusive).
		Exclusive: true,
		Doc: "Mark the node unschedulable, recording which runbook owns the cordon so only that runbook lifts it. " +
			"A node someone else (or another rollbook runbook) cordoned is left alone. The same write closes the deploy " +
			"gates (the next step), so that step has nothing left to write.",
		Done: func(f Facts) (bool, string) {
			return f.Finished || f.ourCordon(), kube.CordonStateOf(f.Node).String()
		},
		Guards: append([]runbook.Guard[Facts]{{
			Name:  "the node is not cordoned by someone else",
			Check: func(f Facts) (bool, string) { return foreignCordon(&f) },
		}}, guards...),
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "cordon",
				Detail: "spec.unschedulable=true, " + kube.AnnCordonedBy + "=" + f.Owner}}
		},
		Act: func(ctx context.Context, f Facts) error {
			return cordonClosingGates(ctx, b.cs, b.rec, f.Node, f.Owner, b.run, gates)
		},
	}
}

func (b *builder) closeGates(id string, gates []string) runbook.Step[Facts] {
	return runbook.Step[Facts]{
		ID: id, Title: "Close the deploy gates",
		Reads: readNode,
		Doc: "Set every deploy-gate label (default tenstorrent.com/deploy.tt-telemetry) to \"false\", so sibling DaemonSets " +
			"that hold /dev/tenstorrent take their pods off the node. The previous values are recorded and restored afterwards.",
		Done: func(f Facts) (bool, string) {
			if f.Finished || len(gates) == 0 {
				return true, "no gates to close"
			}
			if g := firstOpenGate(f.Node, gates); g != "" {
				return false, g + "=" + orUnknown(f.Node.Labels[g])
			}
			return gatesClosed(f.Node, gates), "gates closed"
		},
		Plan: func(f Facts) []runbook.Change {
			var out []runbook.Change
			for _, g := range gates {
				out = append(out, runbook.Change{Object: "node/" + f.Node.Name, Action: "label", Detail: g + "=false"})
			}
			return out
		},
		Act: func(ctx context.Context, f Facts) error { return closeGates(ctx, b.cs, b.rec, f.Node, gates) },
	}
}

// drainFlags are kubectl drain's flags a drain of rollbook's honours.
type drainFlags struct {
	force, deleteEmptyDirData bool
	gracePeriod               *int64
}

// evictDevicePods moves the pods holding the device off the node and waits
// until none is left. d.force also evicts bare pods (kubectl drain --force).
func (b *builder) evictDevicePods(id string, enabled bool, d drainFlags, timeout time.Duration, why string) runbook.Step[Facts] {
	return runbook.Step[Facts]{
		ID: id, Title: "Move device-holding pods away",
		Reads: readNode | readPods,
		Doc: "Evict the pods that hold the device — mounting /dev/tenstorrent, requesting a tenstorrent.com/* resource, or " +
			"found with it open by the probe — through the eviction API, so PodDisruptionBudgets hold, and wait until every " +
			"one is gone, including DaemonSet pods leaving because of the gates. A pod that mounts /dev for other reasons " +
			"(a CSI node plugin) is not a holder.",
		Timeout: timeout,
		Done: func(f Facts) (bool, string) {
			if f.Finished || !enabled {
				return true, "not needed"
			}
			left := f.deviceHolders()
			if len(left) == 0 {
				return f.ourCordon(), "no pod holds /dev/tenstorrent"
			}
			return false, fmt.Sprintf("%d pod(s) hold /dev/tenstorrent: %s", len(left), describeHolderPods(left))
		},
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "evict", Detail: "pods holding " + DevicePathPrefix}}
		},
		Act: func(ctx context.Context, f Facts) error {
			measured := f.measuredHolders()
			holds := func(p *corev1.Pod) bool { return holdReason(p, measured) != "" }
			if bare := bareHolders(f.deviceHolders()); len(bare) > 0 && !d.force {
				return runbook.Blocked(fmt.Errorf("pods without a controller hold /dev/tenstorrent on %s: %s; an eviction "+
					"deletes them for good. Move them yourself, or re-run with --force to evict them", f.Node.Name, bare))
			}
			err := kube.Drain(ctx, b.cs, b.rec, f.Node.Name, kube.DrainOptions{
				PodFilter: holds, Why: why + ": the pod holds /dev/tenstorrent", Timeout: remaining(ctx, timeout), Force: d.force,
				DeleteEmptyDirData: d.deleteEmptyDirData, GracePeriodSeconds: d.gracePeriod,
				Pods: f.Pods, NoWait: true, // Wait watches them go, DaemonSet pods leaving through the gates too
			})
			return blockedIfDrain(err)
		},
		Wait: func(ctx context.Context, f Facts) error {
			// Only a node's kubelet finishes a pod's deletion: on a node that
			// went NotReady the holders never leave. Stop within seconds,
			// naming the node, rather than wait out the budget. (Checked
			// each second after the first: a quick drain costs no read.)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go kube.CancelOnNodeDown(ctx, cancel, b.cs, func(context.Context) string { return f.Node.Name })
			measured := f.measuredHolders()
			holds := func(p *corev1.Pod) bool { return !isHelper(p) && holdReason(p, measured) != "" }
			// A holder bound after the eviction (a scheduler that had not yet
			// seen the cordon, or a pod tolerating it) is evicted too: it
			// would hold the device through the swap, and nothing else moves it.
			seen := map[types.UID]bool{}
			for _, p := range f.Pods {
				seen[p.UID] = true
			}
			arrived := func(p *corev1.Pod) bool { return !seen[p.UID] && kube.Evictable(p) }
			var err error
			for {
				var late []corev1.Pod
				if late, err = kube.WaitForNoPodsOrArrivals(ctx, b.cs, f.Node.Name, holds, arrived); err != nil || len(late) == 0 {
					break
				}
				for _, p := range late {
					seen[p.UID] = true
				}
				err = kube.Drain(ctx, b.cs, b.rec, f.Node.Name, kube.DrainOptions{
					PodFilter: holds, Why: why + ": the pod holds /dev/tenstorrent (it arrived after the cordon)",
					Timeout: remaining(ctx, timeout), Force: d.force, DeleteEmptyDirData: d.deleteEmptyDirData,
					GracePeriodSeconds: d.gracePeriod, Pods: late, NoWait: true,
				})
				if err != nil {
					return blockedIfDrain(err)
				}
			}
			if nd, down := asNodeDown(ctx); down && err != nil {
				return runbook.Blocked(fmt.Errorf("%w: the pods holding /dev/tenstorrent cannot leave it (%s); bring the node back, "+
					"then re-run the same command", nd, b.remainingHolders(f)))
			}
			if err != nil && ctx.Err() != nil {
				return runbook.Blocked(fmt.Errorf("pods still hold /dev/tenstorrent on %s: %s: %w", f.Node.Name, b.remainingHolders(f),
					err))
			}
			return err
		},
	}
}

// remainingHolders re-reads the node's pods to name what still holds it.
func (b *builder) remainingHolders(f Facts) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := kube.PodsOnNode(ctx, b.cs, f.Node.Name)
	if err != nil {
		return "(cannot list them: " + err.Error() + ")"
	}
	f.Pods = pods
	return describeHolderPods(f.deviceHolders())
}

func bareHolders(hs []holder) string {
	var bare []holder
	for _, h := range hs {
		if len(h.Pod.OwnerReferences) == 0 {
			bare = append(bare, h)
		}
	}
	return describeHolderPods(bare)
}

func (b *builder) openGates(id string) runbook.Step[Facts] {
	return runbook.Step[Facts]{
		ID: id, Title: "Reopen the deploy gates",
		Reads: readNode,
		Doc: "Put every deploy-gate label back to the value it had before (or remove it if it was absent), " +
			"so the sibling DaemonSets return.",
		Done: func(f Facts) (bool, string) {
			if f.gatesPriorRecorded() {
				return false, "gates closed; their prior values are recorded"
			}
			return f.Finished, "gates open"
		},
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "label", Detail: "restore deploy gates"}}
		},
		Act: func(ctx context.Context, f Facts) error { return openGates(ctx, b.cs, b.rec, f.Node) },
	}
}

func (b *builder) uncordon(id string) runbook.Step[Facts] {
	return runbook.Step[Facts]{
		ID: id, Title: "Uncordon the node",
		Reads: readNode,
		Doc:   "Lift the cordon this runbook set (and its left-cordoned note). A cordon someone else set stays.",
		Done: func(f Facts) (bool, string) {
			return f.Finished && !f.ourCordon(), kube.CordonStateOf(f.Node).String()
		},
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "uncordon"}}
		},
		Act: func(ctx context.Context, f Facts) error {
			_, err := kube.UncordonNode(ctx, b.cs, b.rec, f.Node, f.Owner)
			return err
		},
	}
}

// cleanup removes the node's finished helper, and the finished helpers of
// also (kmd: a failed kmd-build kept for its log) from earlier attempts.
func (b *builder) cleanup(id string, helperName func(node string) string, also ...string) runbook.Step[Facts] {
	// Also a probe an earlier run left: a run stopped between its probe's
	// record and the probe's deletion, then found the node past the probe.
	leftover := func(f Facts) *corev1.Pod {
		for i := range f.Helpers {
			p := &f.Helpers[i]
			if kube.PodTerminal(p) && slices.Contains(also, p.Labels[kube.LabelHelper]) || kube.OtherRunsHelper(p, "probe", b.run) {
				return p
			}
		}
		return nil
	}
	return runbook.Step[Facts]{
		ID: id, Title: "Remove the helper pod",
		// Finished may be carried over: the node was just uncordoned as
		// finished, and deleting a finished helper decides nothing else.
		Reads: readPods,
		Doc:   "Delete the finished helper pod; its result is kept on the node.",
		Done: func(f Facts) (bool, string) {
			if p := f.Helper.Pod; p != nil {
				return false, "helper " + p.Name + " is " + string(p.Status.Phase)
			}
			if p := leftover(f); p != nil {
				return false, "helper " + p.Name + " is " + string(p.Status.Phase)
			}
			return f.Finished, "no helper left"
		},
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "pod/" + b.helperNS + "/" + helperName(f.Node.Name), Action: "delete"}}
		},
		Act: func(ctx context.Context, f Facts) error {
			if p := f.Helper.Pod; p != nil {
				if err := deleteHelper(ctx, b.cs, b.rec, p); err != nil {
					return err
				}
				// Failed helpers of versions given up on go too, and probes of
				// killed runs: all found among the pods observed on the node.
				if err := b.cleanupHelpers(ctx, f, p.Labels[kube.LabelHelper], p.UID); err != nil {
					return err
				}
			}
			for _, task := range also {
				if err := b.cleanupHelpers(ctx, f, task, ""); err != nil {
					return err
				}
			}
			return b.removeOtherRunsProbes(ctx, f)
		},
	}
}

func blockedIfDrain(err error) error {
	var de *kube.DrainError
	if errors.As(err, &de) {
		return runbook.Blocked(err)
	}
	return err
}

// remaining is what is left of the step's budget (the context deadline).
func remaining(ctx context.Context, fallback time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if r := time.Until(d); r > 0 {
			return r
		}
		return time.Second
	}
	if fallback == 0 {
		return 10 * time.Minute
	}
	return fallback
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func podNames(pods []corev1.Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Namespace+"/"+p.Name)
	}
	sort.Strings(n)
	if len(n) > 5 {
		n = append(n[:5], fmt.Sprintf("and %d more", len(n)-5))
	}
	return strings.Join(n, ", ")
}
