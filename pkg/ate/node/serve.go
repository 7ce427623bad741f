package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The steps after the flip: the node comes up at the target version.

func (b *nodeBuilder) ateletReady() runbook.Step[nodeFacts] {
	o, cs := b.o, b.o.cs
	return runbook.Step[nodeFacts]{
		ID: "ate.node.atelet-ready", Title: "Wait for the atelet of the target version",
		Doc: "Wait until the target version's atelet pod on the node is Ready. It stays Pending while the old one exits, " +
			"because the old one holds the node's host ports. A node that has moved (at the target version, verified, " +
			"neither marked nor cordoned by the flip, no pod of the pools it left) counts as done: a later restart of its " +
			"atelet does not make it half-way again.",
		Timeout: b.cfg.AteletTimeout,
		Done: func(f nodeFacts) (bool, string) {
			if f.moved() {
				// Finished: a later restart of the atelet does not make
				// the node half-way again.
				return true, "node moved to " + f.cfg.To
			}
			if !f.flipped() {
				return false, "node not flipped yet"
			}
			if why, down := kube.NodeNotReadyReason(f.node); down {
				return false, "node NotReady: " + why
			}
			return f.ateletReady()
		},
		Act: func(context.Context, nodeFacts) error { return nil },
		Wait: func(ctx context.Context, f nodeFacts) error {
			// A node whose kubelet is down serves nothing, whatever its pods say: stop within seconds naming it
			// rather than move on to the next node with this one out of service.
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go kube.CancelOnNodeDown(ctx, cancel, cs, func(context.Context) string { return f.node.Name })
			// The node's pods are watched, all of them, by the watch the
			// delete and verify waits go on with: what it shows once the
			// atelet is Ready is the step's look at them (the next step
			// deletes from it).
			g := f
			var err error
			g.pods, err = o.pods(ctx, f.node.Name).until(ctx, func(pods []corev1.Pod) bool {
				h := f
				h.pods = pods
				ok, _ := h.ateletReady()
				return ok
			})
			if err == nil {
				if g.node, err = cs.CoreV1().Nodes().Get(ctx, f.node.Name, metav1.GetOptions{}); err == nil {
					if kube.NodeReady(g.node) {
						if g.inv, err = o.inventory(ctx, g.node.Name, g.pods); err == nil {
							o.saw(g)
						}
					} else {
						err = kube.WaitForNodeReady(ctx, cs, f.node.Name)
					}
				}
			}
			var nd *kube.NodeNotReadyError
			if errors.As(context.Cause(ctx), &nd) {
				return runbook.Blocked(fmt.Errorf("%w: the %s atelet cannot serve there; bring the node back and run the same "+
					"command again", nd, f.cfg.To))
			}
			if err != nil && ctx.Err() != nil {
				// What it waited on, read once more past the budget.
				lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer lcancel()
				h := f
				if pods, perr := o.pods(lctx, f.node.Name).now(lctx); perr == nil {
					h.pods = pods
				}
				_, why := h.ateletReady()
				if p := pendingAtelet(lctx, cs, f.node.Name, f.cfg.To); p != "" {
					why += "; " + p
				}
				return fmt.Errorf("the %s atelet on %s is not Ready (%s): %w. It comes up once the node's old atelet has "+
					"exited; the same command waits for it again. If its log says the image cache \"has layout version\" "+
					"it does not support, clear /var/lib/ate/image-cache on the node (kubectl debug node/%s --image=busybox -- "+
					"rm -rf /host/var/lib/ate/image-cache) and delete the atelet pod", f.cfg.To, f.node.Name, why,
					context.Cause(ctx), f.node.Name)
			}
			return err
		},
	}
}

// pendingAtelet describes the version's atelet pod meant for node that the
// scheduler has not placed yet (a DaemonSet pod names its node in its
// affinity, not spec.nodeName, until then), with the scheduler's reason.
func pendingAtelet(ctx context.Context, cs kubernetes.Interface, node, version string) string {
	l, err := cs.CoreV1().Pods(fleet.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: fleet.AppLabel + "=" + fleet.AteletApp + "," + fleet.VersionLabel + "=" + version, FieldSelector: "spec.nodeName="})
	if err != nil {
		return ""
	}
	for _, p := range l.Items {
		if !affinityNames(&p, node) {
			continue
		}
		s := "atelet pod " + p.Name + " Pending, not scheduled"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
				s += ": " + c.Message
			}
		}
		return s
	}
	return ""
}

// affinityNames reports whether p's required node affinity names node by
// metadata.name, as the DaemonSet controller writes it.
func affinityNames(p *corev1.Pod, node string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range t.MatchFields {
			if r.Key == "metadata.name" && slices.Contains(r.Values, node) {
				return true
			}
		}
	}
	return false
}

func (b *nodeBuilder) deleteOldPods() runbook.Step[nodeFacts] {
	o, cs, rec := b.o, b.o.cs, b.rec
	return runbook.Step[nodeFacts]{
		ID: "ate.node.delete-old-pods", Title: "Delete the node's worker pods of the version it left",
		Doc: "Delete the node's pods of the pools pinned to the version the node left. They are empty (every actor was " +
			"suspended) but still hold capacity; their Deployment cannot put them back on this node any more. Never before the " +
			"flip: the old pool would reschedule them next to the new atelet. The wait for them to go has a budget, and stops " +
			"within seconds when the node goes NotReady (only its kubelet finishes a deletion); it names each pod still " +
			"there and what holds it (finalizers, the node down).",
		Timeout: b.cfg.DeleteTimeout,
		Done: func(f nodeFacts) (bool, string) {
			left := f.podsOf(f.cfg.FromPools)
			why := fmt.Sprintf("%d pod(s) of the %s pools on the node", len(left), f.cfg.From)
			if len(left) > 0 {
				why += ": " + podWaits(left, f.node)
			}
			return f.flipped() && len(left) == 0, why
		},
		Guards: []runbook.Guard[nodeFacts]{
			{Name: "the node's version label is already the target version", Check: func(f nodeFacts) (bool, string) {
				return f.flipped(), "the node still carries " + fleet.VersionLabel + "=" + f.node.Labels[fleet.VersionLabel] +
					"; deleting its worker pods now would bring them straight back next to the other atelet"
			}},
			{Name: "no actor lives on the node's workers of the pools it left", Check: func(f nodeFacts) (bool, string) {
				h := f.fromHosted()
				return len(h) == 0, fmt.Sprintf("%s on the workers of the %s pools; deleting their pods would crash them. %s",
					fleet.Brief(h), f.cfg.From, resuspendAfterFlip(f))
			}},
		},
		Plan: func(f nodeFacts) []runbook.Change {
			var out []runbook.Change
			for _, p := range f.podsOf(f.cfg.FromPools) {
				out = append(out, runbook.Change{Object: "pod/" + p.Namespace + "/" + p.Name, Action: "delete"})
			}
			return out
		},
		Act: func(ctx context.Context, f nodeFacts) error {
			// One Event on the node names every pod deleted (also when a
			// later delete fails), not one per pod.
			deleted := &podNames{}
			defer func() {
				if len(deleted.names) > 0 {
					rec.Record(ctx, kube.NodeRef(f.node), false, "Deleted", fmt.Sprintf("deleted worker pod(s) %s: node %s "+
						"moved to %s; its %s worker pods are no longer needed", strings.Join(deleted.names, ", "), f.node.Name,
						f.cfg.To, f.cfg.From))
				}
			}()
			var pods []idlePod
			for _, p := range f.podsOf(f.cfg.FromPools) {
				pods = append(pods, idlePod{ref: kube.PodRef(&p), uid: p.UID})
			}
			return b.evacuation(nil).deleteIdle(ctx, cs, deleted, pods, resuspendAfterFlip(f))
		},
		Wait: func(ctx context.Context, f nodeFacts) error {
			// Watched until no pod of the pools left is there (a
			// terminating one still counts); the watch's pods, the node as
			// the step found it (nothing here writes it) and a fresh
			// inventory are the step's result.
			// A node whose kubelet is down finishes no deletion: stop within
			// seconds naming it, as the atelet step does.
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go kube.CancelOnNodeDown(ctx, cancel, cs, func(context.Context) string { return f.node.Name })
			g := f
			left := f.podsOf(f.cfg.FromPools)
			var err error
			g.pods, err = o.pods(ctx, f.node.Name).until(ctx, func(pods []corev1.Pod) bool {
				h := f
				h.pods = pods
				left = h.podsOf(f.cfg.FromPools)
				return len(left) == 0
			})
			var nd *kube.NodeNotReadyError
			if errors.As(context.Cause(ctx), &nd) {
				return runbook.Blocked(fmt.Errorf("%w: only its kubelet finishes the deletion of %s; bring the node back and "+
					"run the same command again", nd, podWaits(left, nil)))
			}
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("the %s worker pods on %s are not gone: %s: %w", f.cfg.From, f.node.Name,
						podWaits(left, nil), context.Cause(ctx))
				}
				return err
			}
			if g.inv, err = o.inventory(ctx, g.node.Name, g.pods); err != nil {
				return err
			}
			o.saw(g)
			return nil
		},
	}
}

// podWaits names each pod and what keeps it there: a deletion not yet
// finished (and the finalizers that hold it), the node down (node, when
// given, is read for that).
func podWaits(pods []corev1.Pod, node *corev1.Node) string {
	down := ""
	if node != nil {
		if why, ok := kube.NodeNotReadyReason(node); ok {
			down = "node " + node.Name + " NotReady (" + why + "): only its kubelet finishes a deletion"
		}
	}
	var out []string
	for _, p := range pods {
		s := p.Namespace + "/" + p.Name
		var why []string
		if p.DeletionTimestamp != nil {
			why = append(why, "Terminating since "+p.DeletionTimestamp.UTC().Format(time.RFC3339))
			if len(p.Finalizers) > 0 {
				why = append(why, "held by finalizer(s) "+strings.Join(p.Finalizers, ", ")+
					" (whatever owns them must remove them)")
			}
		} else {
			why = append(why, "not deleted yet")
		}
		out = append(out, s+" ("+strings.Join(why, "; ")+")")
	}
	if len(out) > 6 {
		out = append(out[:6], fmt.Sprintf("and %d more", len(out)-6))
	}
	msg := strings.Join(out, ", ")
	if down != "" {
		msg += "; " + down
	}
	return msg
}

// resuspendAfterFlip is what works for an actor found on a worker of the
// pools a flipped node left: a suspend checkpoints through the atelet on the
// worker's own node, and the flip took that version's atelet off the node,
// so "suspend and re-run" cannot work until the node carries that version
// again. Labelling it back brings that atelet back; the node is then
// half-way (its workers are DRAINING) and the same command drains,
// suspends and flips it again.
func resuspendAfterFlip(f nodeFacts) string {
	return fmt.Sprintf("A suspend needs the %s atelet on the worker's node, which the flip removed: put the label back "+
		"(kubectl label node %s %s=%s --overwrite), wait for the %s atelet there to be Ready, then run the same command "+
		"again: it suspends them and flips the node again. (kubectl ate revert discards their work instead.)",
		f.cfg.From, f.node.Name, fleet.VersionLabel, f.cfg.From, f.cfg.From)
}

func (b *nodeBuilder) verify() runbook.Step[nodeFacts] {
	o := b.o
	return runbook.Step[nodeFacts]{
		ID: "ate.node.verify", Title: "Verify the node serves the target version",
		Doc: "Confirm no pod of the pools the node left remains there, and that every pod of the target version's pools on " +
			"the node is Ready and registered as an ACTIVE worker. (Pods of the target pools may all run on nodes moved " +
			"earlier: the scheduler, not the roll, places them. When no worker of the target pools is ACTIVE on any " +
			"other node, as on the canary, one must come up here. A pod whose image has no build for the node's platform stops " +
			"the wait at once, blocked: waiting cannot fix it.) Then remove " + fleet.AnnVerifyPending + ": until then the " +
			"node is not moved, and the next `roll next-node` finishes it before taking another node.",
		Timeout: b.cfg.VerifyTimeout,
		Done: func(f nodeFacts) (bool, string) {
			if !f.flipped() || len(f.podsOf(f.cfg.FromPools)) > 0 {
				return false, "not moved yet"
			}
			if !f.verifyPending() {
				return true, "verified: " + fleet.AnnVerifyPending + " removed"
			}
			_, why := f.toVerified()
			return false, why
		},
		Plan: func(f nodeFacts) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.node.Name, Action: "annotate",
				Detail: fleet.AnnVerifyPending + "- (once the node serves " + f.cfg.To + ")"}}
		},
		Act: func(context.Context, nodeFacts) error { return nil },
		Wait: func(ctx context.Context, f nodeFacts) error {
			defer o.close() // the last step
			if ok, why := f.toVerified(); ok {
				return b.verified(ctx, f, why)
			}
			// The node's pods are watched the whole time (one request)
			// while registration is polled (the substrate API has no
			// watch), gently: the step ends on the pods as the watch shows
			// them then and the inventory just read.
			pw := o.pods(ctx, f.node.Name)
			g := f
			for delay := 100 * time.Millisecond; ; {
				pods, err := pw.now(ctx)
				if err != nil {
					return fmt.Errorf("%s worker pods on %s are not Ready: %w", f.cfg.To, f.node.Name, err)
				}
				g.pods = pods
				if why := fleet.WrongPlatformPods(g.podsOf(g.cfg.ToPools), g.node); why != "" {
					return runbook.Blocked(errors.New(why))
				}
				ready, total := g.toPodsReady()
				if ready == total {
					if g.inv, err = o.inventory(ctx, g.node.Name, g.pods); err != nil {
						return err
					}
					if ok, why := g.toVerified(); ok {
						return b.verified(ctx, g, why)
					}
				}
				select {
				case <-ctx.Done():
					if ready < total {
						return fmt.Errorf("%s worker pods on %s are not Ready (%d of %d; not Ready: %s): %w", f.cfg.To, f.node.Name,
							ready, total, strings.Join(g.toPodsNotReady(), ", "), context.Cause(ctx))
					}
					_, why := g.toVerified()
					return fmt.Errorf("%s on %s: %w", why, f.node.Name, context.Cause(ctx))
				case <-pw.changed: // a pod changed: look again
				case <-time.After(delay):
					delay = min(2*delay, 3*time.Second)
				}
			}
		},
	}
}

// verified removes the node's AnnVerifyPending now that f shows it serves
// the target version (why), and hands f, brought up to that write, to the
// engine's look.
func (b *nodeBuilder) verified(ctx context.Context, f nodeFacts, why string) error {
	if _, err := kube.SetNodeKeysRecorded(ctx, b.o.cs, b.rec, f.node.Name, kube.NodeChange{
		Annotations: map[string]*string{fleet.AnnVerifyPending: nil}}, "NodeVerified", f.cfg.To+" serves here: "+why); err != nil {
		return err
	}
	b.o.saw(f)
	return nil
}

// podNames is a kube.Recorder that only collects the pods recorded
// ("namespace/name (uid …)"), for one Event about them all.
type podNames struct{ names []string }

// Record implements kube.Recorder.
func (p *podNames) Record(_ context.Context, obj corev1.ObjectReference, _ bool, _, _ string) {
	p.names = append(p.names, fmt.Sprintf("%s/%s (uid %s)", obj.Namespace, obj.Name, obj.UID))
}

// replaceStale replaces the node's drained workers of its own version
// when a move left them there and there is no undrain: a move the other
// way drained them and never flipped the node (taken back), or flipped it
// and stopped before deleting their pods (the canary whose new atelet never
// became Ready, rolled back). It runs once the target version's atelet is
// Ready, so a suspend of an actor still on them reaches it. After an
// ordinary flip it has nothing to do.
func (b *nodeBuilder) replaceStale() runbook.Step[nodeFacts] {
	o, cs, rec := b.o, b.o.cs, b.rec
	return runbook.Step[nodeFacts]{
		ID: "ate.node.replace-drained", Title: "Replace the node's drained workers of its own version",
		Doc: "For a node a move left with DRAINING workers of the version it is now at — a move the other way drained it " +
			"and never flipped it, or flipped it and stopped before deleting their pods (a canary whose new atelet never " +
			"became Ready, rolled back) — once that version's atelet is Ready: lift the flip's cordon, suspend the actors " +
			"still on the drained workers (as the suspend step does), and delete those workers' pods (declared on the Lease " +
			"as rollbook.dev/recovering-node until they are gone), so their Deployments " +
			"replace them with workers that take actors; the verify step then waits for the replacements on the node to " +
			"serve. After an ordinary flip the node's workers of the target pools are new, and there is nothing to do.",
		Timeout: b.cfg.SuspendTimeout,
		Guards:  []runbook.Guard[nodeFacts]{capacityGuard()},
		Done: func(f nodeFacts) (bool, string) {
			if !f.flipped() {
				return false, "node not flipped yet"
			}
			if !f.replacing() {
				// Workers drained with no move recorded are recover-node's:
				// the marks are a move's only record.
				return true, "no move recorded on the node"
			}
			s := f.stale()
			return len(s) == 0, fmt.Sprintf("%d DRAINING worker(s) of the %s pools with their pod still on the node", len(s),
				f.cfg.To)
		},
		Plan: func(f nodeFacts) []runbook.Change {
			var out []runbook.Change
			if f.ourCordon() {
				out = append(out, runbook.Change{Object: "node/" + f.node.Name, Action: "uncordon", Detail: "the flip's cordon"})
			}
			live, crashed := f.staleView().residents()
			out = append(out, suspendPlan(live, crashed)...)
			for _, w := range f.stale() {
				out = append(out, runbook.Change{Object: "pod/" + w.Namespace + "/" + w.Pod, Action: "delete",
					Detail: "worker " + w.Name + " DRAINING"})
			}
			return out
		},
		Act: func(ctx context.Context, f nodeFacts) error {
			// The node stays at its version: its replacements may land on it.
			if _, err := kube.UncordonNode(ctx, cs, rec, f.node, CordonOwner); err != nil {
				return err
			}
			stale := f.stale()
			evac := b.evacuation(func(ctx context.Context, _ nodeFacts) (nodeFacts, error) {
				g, err := o.read(ctx, f.node.Name, partPods|partInv)
				if err != nil {
					return g, err
				}
				// Narrowed to the workers first found: the ones to delete.
				return nodeFacts{cfg: &Config{}, node: g.node, inv: narrowTo(g.inv, f.node.Name, stale)}, nil
			})
			evac.record, evac.settled = nil, nil
			if err := evac.empty(ctx, f.staleView()); err != nil {
				return err
			}
			var pods []idlePod
			for _, w := range stale {
				pods = append(pods, idlePod{ref: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: w.Namespace,
					Name: w.Pod}, uid: types.UID(w.Name), why: fmt.Sprintf("worker %s on node %s was drained by a move that did "+
					"not finish, and there is no undrain; its pool replaces the pod", w.Name, f.node.Name)})
			}
			if b.cfg.ReplaceInPlace == nil || len(pods) == 0 {
				return evac.deleteIdle(ctx, cs, rec, pods, "Re-run to suspend it")
			}
			undo, err := b.cfg.ReplaceInPlace(ctx, f.node.Name)
			if err != nil {
				return err
			}
			defer undo()
			if err := evac.deleteIdle(ctx, cs, rec, pods, "Re-run to suspend it"); err != nil {
				return err
			}
			// The declaration holds until the pods are gone: a deletion
			// lasts until then, and one judged after the declaration was
			// taken back is a pinned pod deleted on a node at its version.
			// A node whose kubelet is down finishes no deletion.
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go kube.CancelOnNodeDown(ctx, cancel, cs, func(context.Context) string { return f.node.Name })
			gone := map[types.UID]bool{}
			for _, p := range pods {
				gone[p.uid] = true
			}
			_, err = o.pods(ctx, f.node.Name).until(ctx, func(ps []corev1.Pod) bool {
				for i := range ps {
					if gone[ps[i].UID] {
						return false
					}
				}
				return true
			})
			if err != nil && context.Cause(ctx) != nil {
				return fmt.Errorf("the drained worker pods on %s are not gone: %w", f.node.Name, context.Cause(ctx))
			}
			return err
		},
	}
}
