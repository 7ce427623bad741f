package tt

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// work is what every tt node runbook observes about a node.
type work struct {
	owner  string // the runbook that owns the node's cordon while it works
	node   *corev1.Node
	helper helperFacts
	// pods on the node; listed only while the node is in progress.
	pods []corev1.Pod
}

// nodeFacts is implemented by each runbook's facts.
type nodeFacts interface {
	base() *work
	// finished reports the runbook's result recorded on the node: the point
	// after which the disruptive steps count as done.
	finished() bool
}

func (w *work) ourCordon() bool { return kube.CordonStateOf(w.node).Owner == w.owner }

func (w *work) gatesPriorRecorded() bool {
	_, ok := w.node.Annotations[AnnGatesPrior]
	return ok
}

func (w *work) devicePods() []corev1.Pod {
	var out []corev1.Pod
	for _, p := range w.pods {
		if active(&p) && !isHelper(&p) && mountsDevice(&p) {
			out = append(out, p)
		}
	}
	return out
}

// observeWork reads the node, its helper pod and, while the node is ours,
// its pods until the runbook's result is recorded on it.
func observeWork(ctx context.Context, cs kubernetes.Interface, owner, node, helperNS, helperName string, finished func(*corev1.Node) bool) (work, error) {
	w := work{owner: owner}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return w, err
	}
	w.node = n
	if w.helper, err = observeHelper(ctx, cs, helperNS, helperName); err != nil {
		return w, err
	}
	if w.ourCordon() && !finished(n) {
		w.pods, err = kube.PodsOnNode(ctx, cs, node)
	}
	return w, err
}

// workNotes tells a person what a stopped run left behind on the node.
func workNotes(w *work) []string {
	var notes []string
	if w.ourCordon() {
		notes = append(notes, fmt.Sprintf("node %s is still cordoned by rollbook %s; re-run the same command to continue, or `kubectl uncordon %s` to give up", w.node.Name, w.owner, w.node.Name))
	}
	if w.gatesPriorRecorded() {
		notes = append(notes, "deploy-gate labels are set to \"false\" on this node until the run finishes")
	}
	return notes
}

func cordonStep[F nodeFacts](id string, cs kubernetes.Interface, rec kube.Recorder, run string) runbook.Step[F] {
	return runbook.Step[F]{
		ID: id, Title: "Cordon the node",
		Doc: "Mark the node unschedulable, recording which runbook owns the cordon so only that runbook lifts it. A node someone else cordoned is left alone.",
		Done: func(f F) (bool, string) {
			w := f.base()
			return f.finished() || w.ourCordon(), kube.CordonStateOf(w.node).String()
		},
		Guards: []runbook.Guard[F]{{
			Name: "the node is not cordoned by someone else",
			Check: func(f F) (bool, string) {
				n := f.base().node
				return !kube.CordonStateOf(n).Foreign(), fmt.Sprintf("node %s was cordoned by someone else; rollbook will not take over a cordon it did not set. Uncordon it first if it may be upgraded", n.Name)
			},
		}},
		Plan: func(f F) []runbook.Change {
			w := f.base()
			return []runbook.Change{{Object: "node/" + w.node.Name, Action: "cordon", Detail: "spec.unschedulable=true, " + kube.AnnCordonedBy + "=" + w.owner}}
		},
		Act: func(ctx context.Context, f F) error {
			w := f.base()
			_, err := kube.CordonNode(ctx, cs, rec, w.node, w.owner, run)
			return err
		},
	}
}

func closeGatesStep[F nodeFacts](id string, gates []string, cs kubernetes.Interface, rec kube.Recorder) runbook.Step[F] {
	return runbook.Step[F]{
		ID: id, Title: "Close the deploy gates",
		Doc: "Set every deploy-gate label (default tenstorrent.com/deploy.tt-telemetry) to \"false\", so sibling DaemonSets that hold /dev/tenstorrent take their pods off the node. The previous values are recorded and restored afterwards.",
		Done: func(f F) (bool, string) {
			w := f.base()
			if f.finished() || len(gates) == 0 {
				return true, "no gates to close"
			}
			for _, g := range gates {
				if w.node.Labels[g] != "false" {
					return false, g + "=" + orUnknown(w.node.Labels[g])
				}
			}
			return w.gatesPriorRecorded(), "gates closed"
		},
		Plan: func(f F) []runbook.Change {
			var out []runbook.Change
			for _, g := range gates {
				out = append(out, runbook.Change{Object: "node/" + f.base().node.Name, Action: "label", Detail: g + "=false"})
			}
			return out
		},
		Act: func(ctx context.Context, f F) error { return closeGates(ctx, cs, rec, f.base().node, gates) },
	}
}

func evictDevicePodsStep[F nodeFacts](id string, enabled bool, timeout time.Duration, why string, cs kubernetes.Interface, rec kube.Recorder) runbook.Step[F] {
	return runbook.Step[F]{
		ID: id, Title: "Move device-holding pods away",
		Doc:     "Evict pods that mount /dev/tenstorrent (through the eviction API, so PodDisruptionBudgets hold) and wait until every pod holding the device — including DaemonSet pods leaving because of the gates — is gone.",
		Timeout: timeout,
		Done: func(f F) (bool, string) {
			w := f.base()
			if f.finished() || !enabled {
				return true, "not needed"
			}
			left := w.devicePods()
			if len(left) == 0 {
				return w.ourCordon(), "no pod holds /dev/tenstorrent"
			}
			return false, fmt.Sprintf("%d pod(s) hold /dev/tenstorrent: %s", len(left), podNames(left))
		},
		Plan: func(f F) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.base().node.Name, Action: "evict", Detail: "pods mounting " + DevicePathPrefix}}
		},
		Act: func(ctx context.Context, f F) error {
			err := kube.Drain(ctx, cs, rec, f.base().node.Name, kube.DrainOptions{
				PodFilter: mountsDevice, Why: why + ": the pod holds /dev/tenstorrent", Timeout: remaining(ctx, timeout),
			})
			return blockedIfDrain(err)
		},
		Wait: func(ctx context.Context, f F) error {
			node := f.base().node.Name
			err := kube.WaitForNoPods(ctx, cs, node, func(p *corev1.Pod) bool { return !isHelper(p) && mountsDevice(p) })
			if err != nil && ctx.Err() != nil {
				return runbook.Blocked(fmt.Errorf("pods still hold /dev/tenstorrent on %s (a DaemonSet without the deploy gate, or a pod tolerating the cordon?): %w", node, err))
			}
			return err
		},
	}
}

func openGatesStep[F nodeFacts](id string, cs kubernetes.Interface, rec kube.Recorder) runbook.Step[F] {
	return runbook.Step[F]{
		ID: id, Title: "Reopen the deploy gates",
		Doc: "Put every deploy-gate label back to the value it had before (or remove it if it was absent), so the sibling DaemonSets return.",
		Done: func(f F) (bool, string) {
			if f.base().gatesPriorRecorded() {
				return false, "gates closed; their prior values are recorded"
			}
			return f.finished(), "gates open"
		},
		Plan: func(f F) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.base().node.Name, Action: "label", Detail: "restore deploy gates"}}
		},
		Act: func(ctx context.Context, f F) error { return openGates(ctx, cs, rec, f.base().node) },
	}
}

func uncordonStep[F nodeFacts](id string, cs kubernetes.Interface, rec kube.Recorder) runbook.Step[F] {
	return runbook.Step[F]{
		ID: id, Title: "Uncordon the node",
		Doc: "Lift the cordon this runbook set. A cordon someone else set stays.",
		Done: func(f F) (bool, string) {
			w := f.base()
			return f.finished() && !w.ourCordon(), kube.CordonStateOf(w.node).String()
		},
		Plan: func(f F) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.base().node.Name, Action: "uncordon"}}
		},
		Act: func(ctx context.Context, f F) error {
			w := f.base()
			_, err := kube.UncordonNode(ctx, cs, rec, w.node, w.owner)
			return err
		},
	}
}

func cleanupStep[F nodeFacts](id, helperNS string, helperName func(node string) string, cs kubernetes.Interface, rec kube.Recorder) runbook.Step[F] {
	return runbook.Step[F]{
		ID: id, Title: "Remove the helper pod",
		Doc: "Delete the finished helper pod; its result is kept on the node.",
		Done: func(f F) (bool, string) {
			if p := f.base().helper.Pod; p != nil {
				return false, "helper " + p.Name + " is " + string(p.Status.Phase)
			}
			return f.finished(), "no helper left"
		},
		Plan: func(f F) []runbook.Change {
			return []runbook.Change{{Object: "pod/" + helperNS + "/" + helperName(f.base().node.Name), Action: "delete"}}
		},
		Act: func(ctx context.Context, f F) error {
			if p := f.base().helper.Pod; p != nil {
				return deleteHelper(ctx, cs, rec, p)
			}
			return nil
		},
	}
}

// withGuard adds a guard to a shared step.
func withGuard[F nodeFacts](s runbook.Step[F], g runbook.Guard[F]) runbook.Step[F] {
	s.Guards = append(append([]runbook.Guard[F]{}, s.Guards...), g)
	return s
}
