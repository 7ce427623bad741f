package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The flip: the node's version label changes only on a second look, made
// inside a cordon, that finds the node empty.

func (b *nodeBuilder) flip() runbook.Step[nodeFacts] {
	return runbook.Step[nodeFacts]{
		ID: "ate.node.flip", Title: "Flip the node's version label",
		Doc: "Cordon the node, look at it again, and only if that look finds it empty set ate.dev/substrate-version to the " +
			"target version, lifting the cordon, removing " + fleet.AnnMovingTo + " and marking the node " + fleet.AnnVerifyPending +
			" (until the verify step sees it serve) in the same patch (made at the node's " +
			"version of the look; without the cordon by then, no flip). The old atelet pod leaves on its own and the new one " +
			"starts.",
		Done: func(f nodeFacts) (bool, string) {
			return f.flipped(), fleet.VersionLabel + "=" + f.node.Labels[fleet.VersionLabel]
		},
		Guards: flipGuards(),
		Plan: func(f nodeFacts) []runbook.Change {
			n := "node/" + f.node.Name
			return []runbook.Change{{Object: n, Action: "cordon", Detail: "while the flip is decided and made"},
				{Object: n, Action: "label", Detail: fleet.VersionLabel + "=" + f.cfg.To},
				{Object: n, Action: "uncordon", Detail: "in the label's patch"},
				{Object: n, Action: "annotate", Detail: fleet.AnnMovingTo + "-, " + AnnResidents + "-, " + fleet.AnnVerifyPending + "=" +
					f.cfg.To + " (in the label's patch)"}}
		},
		Act: b.flipNode,
	}
}

func flipGuards() []runbook.Guard[nodeFacts] {
	return []runbook.Guard[nodeFacts]{
		visibleGuard(),
		{Name: "every worker on the node is draining", Check: func(f nodeFacts) (bool, string) {
			return len(f.undrained()) == 0, fmt.Sprintf("%d worker(s) on the node are not draining", len(f.undrained()))
		}},
		{Name: "no actor lives on the node", Check: func(f nodeFacts) (bool, string) {
			live, crashed := f.residents()
			return len(live)+len(crashed) == 0, fmt.Sprintf("%d actor(s) still live on the node", len(live)+len(crashed))
		}},
		{Name: "no worker on the node says it hosts an actor", Check: func(f nodeFacts) (bool, string) {
			h := f.hosting()
			return len(h) == 0, fmt.Sprintf("worker(s) %s still host an actor the actor list did not show; re-run to "+
				"suspend it", fleet.Brief(h))
		}},
		{Name: "every worker pod on the node is a registered, draining worker", Check: func(f nodeFacts) (bool, string) {
			u := f.unregistered()
			return len(u) == 0, fmt.Sprintf("worker pod(s) %s on the node are not registered as workers yet, so they could "+
				"not be drained; re-run once they register (kubectl ate status)", fleet.Brief(u))
		}},
	}
}

// flipBlockers are the flip's guards that fail on f, each with its reason.
func (f nodeFacts) flipBlockers() []string {
	var out []string
	for _, g := range flipGuards() {
		if ok, why := g.Check(f); !ok {
			out = append(out, why)
		}
	}
	return out
}

// flipNode cordons the node, looks at it a second time, and flips its label
// only if that look agrees the node is empty; then it lifts the cordon. The
// cordon keeps a replacement worker pod from landing on the node between
// the look and the label patch (after the patch the old pools' node
// selectors keep them off). The second look is a fresh read of every list
// (the node itself is the cordon's response, made inside the cordon): one
// (soft) list that missed a paused actor in the observation that found the
// node empty cannot by itself let the flip go.
func (b *nodeBuilder) flipNode(ctx context.Context, f nodeFacts) (err error) {
	o, rec := b.o, b.rec
	// The cordon's Event is held until the flip's: a flip that lifts the
	// cordon in its patch says both in one Event (the cordon lasts the few
	// requests of the second look, and while it is on, the node names its
	// owner, run and time in its own annotations); otherwise the Cordoned
	// Event is written before the Uncordoned one, as before.
	held := &heldRecords{}
	flipped := false
	// From the run's latest write to the node (the step clock the engine
	// just cleared), so the cordon's resourceVersion precondition holds.
	if _, err := kube.CordonNode(ctx, o.cs, held, o.newest(f.node), CordonOwner, f.cfg.RunID); err != nil {
		return err
	}
	node := f.node
	var look *nodeFacts // the second look
	defer func() {
		if !flipped {
			held.flush(ctx, rec)
		}
		// Lifted even when the run is being stopped; the release step
		// lifts it if this does not get through.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := kube.UncordonNode(uctx, o.cs, rec, o.newest(node), CordonOwner); uerr != nil {
			err = errors.Join(err, uerr)
		}
		if err == nil && look != nil {
			// The second look, its node brought up to the label patch and
			// the uncordon (saw takes their response): the flip's result.
			o.saw(*look)
		}
	}()
	g, err := o.look(ctx, f.node.Name) // the node: the cordon's response
	if err != nil {
		return err
	}
	look = &g
	node = g.node
	if g.flipped() {
		return nil
	}
	blockers := g.flipBlockers()
	gone, err := confirmGone(ctx, o.api, g)
	if err != nil {
		return err
	}
	if blockers = append(blockers, gone...); len(blockers) > 0 {
		// Nothing was flipped; the steps before the flip see to what moved
		// in (a new worker pod is drained, a new resident suspended).
		return runbook.Again(fmt.Errorf("node %s not flipped: a second look found %s; re-run", f.node.Name,
			strings.Join(blockers, "; ")))
	}
	// One patch flips the label, lifts our cordon and removes the moving
	// mark: the node becomes schedulable only together with the label that
	// keeps the old pools off it. Our cordon gone by then means a pod may
	// have landed after the look: no flip.
	msg := fmt.Sprintf("%s: %s → %s", fleet.VersionLabel, f.cfg.From, f.cfg.To)
	n, lifted, err := flipPatch(ctx, o.cs, g.node, f.cfg.To)
	if err != nil {
		return recordFlipIfApplied(ctx, err, o.cs, rec, g.node.Name, f.cfg.To, msg)
	}
	node = n
	if lifted {
		if c := held.messages("Cordoned"); c != "" {
			msg = c + " for the flip; " + msg
			held.drop("Cordoned")
		}
		msg += "; uncordoned in the same patch, " + fleet.AnnMovingTo + " removed"
	}
	held.flush(ctx, rec) // anything else held, first
	flipped = true
	rec.Record(ctx, kube.NodeRef(n), false, "SubstrateVersionFlipped", msg)
	return nil
}

// confirmGone reads every recorded resident directly: the ones still awake
// (or paused) on the node, which a list may have left out.
func confirmGone(ctx context.Context, api API, f nodeFacts) ([]string, error) {
	uids := map[string]bool{}
	for _, p := range f.pods {
		uids[string(p.UID)] = true
	}
	var out []string
	for _, r := range f.recorded() {
		a, err := api.GetActor(ctx, r.Atespace, r.Name)
		switch {
		case errors.Is(err, ateapi.ErrNotFound):
		case err != nil:
			return nil, err
		case a.State == ateapi.ActorSuspended:
		case (a.Worker != "" && uids[a.Worker]) || (a.Worker == "" && a.OnNode(f.node.Name)): // bound or pinned, as residents()
			out = append(out, fmt.Sprintf("actor %s is %s on the node (read directly)", r, a.State))
		}
	}
	return out, nil
}

// recordFlipIfApplied keeps the record of a flip that failed only because
// the run was interrupted mid-request, if the server applied it: the node
// now carries the target version (it did not at the second look).
func recordFlipIfApplied(ctx context.Context, err error, cs kubernetes.Interface, rec kube.Recorder, node, to, msg string) error {
	return kube.RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "SubstrateVersionFlipped", msg,
		func(n *corev1.Node) bool { return n.Labels[fleet.VersionLabel] == to })
}

// flipPatch labels the node to, with our cordon lifted and the moving mark
// removed in the same patch. The patch is a JSON patch that first tests
// the node is still cordoned by us (a cordon's own fields, so the taint the
// node controller adds for a cordon, or a kubelet's status, cannot make it
// conflict); if that patch cannot apply, the node is read again and the
// change decided on it. A cordon someone else set stays (label and mark
// only); no cordon at all: no flip.
//
// The patch also takes along the step clock the suspend step left (the
// engine clears a done step's clock only if the next write did not).
func flipPatch(ctx context.Context, cs kubernetes.Interface, look *corev1.Node, to string) (*corev1.Node, bool, error) {
	marks := []string{fleet.AnnMovingTo, AnnResidents, runbook.TimerKey(RunbookName)}
	cordon := []string{kube.AnnCordonedBy, kube.AnnCordonedAt, kube.AnnCordonRun, kube.AnnLeftCordoned}
	if st := kube.CordonStateOf(look); st.Cordoned && st.Owner == CordonOwner {
		type op struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value,omitempty"`
		}
		ann := func(k string) string { return "/metadata/annotations/" + kube.JSONPointerEscape(k) }
		ops := []op{{Op: "test", Path: "/spec/unschedulable", Value: true},
			{Op: "test", Path: ann(kube.AnnCordonedBy), Value: CordonOwner},
			{Op: "add", Path: "/metadata/labels/" + kube.JSONPointerEscape(fleet.VersionLabel), Value: to},
			{Op: "add", Path: ann(fleet.AnnVerifyPending), Value: to},
			{Op: "replace", Path: "/spec/unschedulable", Value: false}}
		for _, k := range append(marks, cordon...) {
			if _, ok := look.Annotations[k]; ok {
				ops = append(ops, op{Op: "remove", Path: ann(k)})
			}
		}
		b, err := json.Marshal(ops)
		if err != nil {
			return nil, false, err
		}
		if n, err := cs.CoreV1().Nodes().Patch(ctx, look.Name, types.JSONPatchType, b, metav1.PatchOptions{}); err == nil {
			return n, true, nil
		} else if ctx.Err() != nil {
			return nil, false, err
		}
	}
	lifted := false
	n, err := kube.UpdateNode(ctx, cs, look.Name, func(n *corev1.Node) (kube.NodeChange, error) {
		lifted = false
		st := kube.CordonStateOf(n)
		if !st.Cordoned {
			return kube.NodeChange{}, fmt.Errorf("node %s not flipped: its cordon was lifted after the second look; re-run", n.Name)
		}
		c := kube.NodeChange{Labels: map[string]*string{fleet.VersionLabel: ptr.To(to)}, Annotations: map[string]*string{
			fleet.AnnVerifyPending: ptr.To(to)}}
		for _, k := range marks {
			c.Annotations[k] = nil
		}
		if st.Owner == CordonOwner {
			lifted = true
			c.Unschedulable = ptr.To(false)
			for _, k := range cordon {
				c.Annotations[k] = nil
			}
		}
		return c, nil
	})
	return n, lifted, err
}

// heldRecords is a kube.Recorder that holds records until flushed (or
// folded into another record).
type heldRecords struct {
	recs []heldRecord
}

type heldRecord struct {
	obj             corev1.ObjectReference
	warning         bool
	reason, message string
}

// Record implements kube.Recorder.
func (h *heldRecords) Record(_ context.Context, obj corev1.ObjectReference, warning bool, reason, message string) {
	h.recs = append(h.recs, heldRecord{obj, warning, reason, message})
}

// messages joins the messages held with reason.
func (h *heldRecords) messages(reason string) string {
	var out []string
	for _, r := range h.recs {
		if r.reason == reason {
			out = append(out, r.message)
		}
	}
	return strings.Join(out, "; ")
}

// drop forgets the records held with reason.
func (h *heldRecords) drop(reason string) {
	kept := h.recs[:0]
	for _, r := range h.recs {
		if r.reason != reason {
			kept = append(kept, r)
		}
	}
	h.recs = kept
}

// flush records what is held, in order, and forgets it.
func (h *heldRecords) flush(ctx context.Context, rec kube.Recorder) {
	for _, r := range h.recs {
		rec.Record(ctx, r.obj, r.warning, r.reason, r.message)
	}
	h.recs = nil
}
