package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RunbookName owns the timers of moving nodes.
const RunbookName = "ate-node"

// Sides says which way a node moves: roll is OLD → NEW, rollback the mirror.
type Sides struct {
	From, To  string
	ToAtelet  string // the DaemonSet of To
	FromPools []fleet.Pool
	ToPools   []fleet.Pool
	NodesAtTo map[string]bool
	FirstNode bool // no node is at To yet: no capacity to require
	// Lineage maps each serving pool's and its clone's key to the serving
	// pool's key (see Lineages).
	Lineage map[string]string
}

// Config tunes moving a node.
type Config struct {
	Sides
	MaxConcurrentSuspends int
	SuspendInterval       time.Duration
	RevertCrashed         bool
	SuspendTimeout        time.Duration
	AteletTimeout         time.Duration
	// DeleteTimeout bounds the wait for the old-pool pods to go after the
	// flip (a finalizer may hold one), kept across re-runs.
	DeleteTimeout time.Duration
	VerifyTimeout time.Duration
	// PullTimeout bounds the pull of a clone's images on a platform's
	// first node, before any node of that platform moves to NEW.
	PullTimeout time.Duration
	// RegisterTimeout bounds the wait for a worker pod on the node to
	// register as a worker before the flip; then the run stops blocked.
	RegisterTimeout time.Duration
	// Pace is the suspend pace earlier runs measured on the fleet (the
	// latest AnnSuspendPace on any node); unknown: nothing is projected.
	Pace  Pace
	RunID string
	// ReplaceInPlace (nil: nothing to say) declares, for anyone watching
	// for pinned pods deleted before a flip, that the run deletes node's
	// drained worker pods so their pools replace them there (the
	// take-back); the returned func takes the declaration back.
	ReplaceInPlace func(ctx context.Context, node string) (func(), error) `json:"-"`
	// MarkDown (nil: nothing) marks, in each inventory the run reads, the
	// workers that cannot serve whatever the substrate says (fleet.MarkDown),
	// so capacity and "serving" weigh only workers that can. It is given
	// the node's pods as the run read them with that inventory: the pick's
	// list would keep a pod Pending there that has long been scheduled and
	// serves.
	MarkDown func(inv *ateapi.Inventory, node string, pods []corev1.Pod) `json:"-"`
}

// API is the part of the substrate client the node runbook uses.
type API interface {
	Inventory(ctx context.Context) (*ateapi.Inventory, error)
	DrainWorker(ctx context.Context, name string) (ateapi.Worker, error)
	GetWorker(ctx context.Context, name string) (ateapi.Worker, error)
	GetActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
	SuspendActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
	RevertActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
	// ProbeMove asks, with calls that change nothing, which calls of a
	// move authorization refuses (ateapi.Client.ProbeMove).
	ProbeMove(ctx context.Context, atespaces []string) ([]ateapi.Refusal, []string, error)
}

// Runbook moves one node from cfg.From to cfg.To — the runbook's step 5
// a–f for a roll, and the same with the sides swapped for a rollback.
func Runbook(cs kubernetes.Interface, api API, rec kube.Recorder, cfg *Config) *runbook.Runbook[nodeFacts] {
	return nodeRunbook(newNodeObserver(cs, api, cfg), rec)
}

// nodeBuilder makes the node runbook's steps, one method each, over one
// observer (every fact the steps read comes from it) and the run's
// recorder.
type nodeBuilder struct {
	o   *nodeObserver
	rec kube.Recorder
	cfg *Config
}

func nodeRunbook(o *nodeObserver, rec kube.Recorder) *runbook.Runbook[nodeFacts] {
	b := &nodeBuilder{o: o, rec: rec, cfg: o.cfg}
	return &runbook.Runbook[nodeFacts]{
		Name:  RunbookName,
		Title: "Move one Agent Substrate node to another version",
		Doc: `Record the move on the node, drain every worker on it, suspend every actor living there (bound
to its workers, or paused with local state on it) until none is left, re-drain, flip the node's
ate.dev/substrate-version label, wait for that version's atelet to be Ready, and only then
delete the node's worker pods of the pools pinned to the version it left. No actor is ever
lost: a crashed actor stops the run unless --revert-crashed says to revert it.`,
		Observe: func(ctx context.Context, t runbook.Target) (nodeFacts, error) {
			return o.look(ctx, t.Ref().Name)
		},
		// Step clocks are read from the observed node: no read of their own.
		Annotation: func(f nodeFacts, key string) (string, bool) {
			v, ok := f.node.Annotations[key]
			return v, ok
		},
		Notes: nodeFacts.notes,
		Steps: []runbook.Step[nodeFacts]{
			b.mark(), b.drain(), b.suspend(), b.flip(), b.release(), b.ateletReady(), b.replaceStale(), b.deleteOldPods(), b.verify(),
		},
	}
}

// evacuation is how this node's move empties it; look is the read between
// rounds.
func (b *nodeBuilder) evacuation(look func(context.Context, nodeFacts) (nodeFacts, error)) *evacuation {
	return &evacuation{api: b.o.api, rec: b.rec, maxSuspends: b.cfg.MaxConcurrentSuspends, suspendInterval: b.cfg.SuspendInterval,
		revertCrashed: b.cfg.RevertCrashed, registerTimeout: b.cfg.RegisterTimeout, clearUnregistered: b.clearUnregistered, look: look,
		record: b.record, settled: b.o.saw}
}

// clearUnregistered takes off the node the worker pods of the pools it
// leaves that never registered within --register-timeout (an ateom that
// cannot reach the control plane, a canary's new workers rolled back):
// there is no worker to drain, so the flip would wait for them on every
// re-run. Such a pod holds no actor — the control plane places actors on
// registered workers only, and each pod's own worker is read just before
// its delete (one that registered meanwhile is drained, and kept if it
// was handed an actor). The node is cordoned first (the flip lifts the
// cordon) so their pools' replacements land elsewhere, not right back;
// the flip deletes the rest of those pools' pods anyway.
func (b *nodeBuilder) clearUnregistered(ctx context.Context, f nodeFacts) error {
	stuck := f.unregisteredPods()
	if len(stuck) == 0 {
		return nil
	}
	if _, err := kube.CordonNode(ctx, b.o.cs, b.rec, b.o.newest(f.node), CordonOwner, b.cfg.RunID); err != nil {
		return fmt.Errorf("cordon node %s before deleting its unregistered worker pods: %w", f.node.Name, err)
	}
	var pods []idlePod
	for _, p := range stuck {
		pods = append(pods, idlePod{ref: kube.PodRef(&p), uid: p.UID, why: fmt.Sprintf("worker pod on node %s never registered "+
			"as a worker within --register-timeout %s, so it holds no actor and cannot be drained; the node is cordoned and "+
			"moves to %s, its pool replaces the pod elsewhere", f.node.Name, b.cfg.RegisterTimeout, f.cfg.To)})
	}
	return b.evacuation(nil).deleteIdle(ctx, b.o.cs, b.rec, pods, "Re-run to drain and suspend it")
}

// pacedEvacuation is evacuation with the suspends timed against the step's
// budget, from the pace known before (the node's own record or the
// fleet's), the measurement recorded on the node.
func (b *nodeBuilder) pacedEvacuation(f nodeFacts, look func(context.Context, nodeFacts) (nodeFacts, error)) *evacuation {
	e := b.evacuation(look)
	e.meter, e.budget = newPaceMeter(f.knownPace()), b.cfg.SuspendTimeout
	node := f.node.Name
	e.measured = func(ctx context.Context, p Pace) error {
		_, err := kube.SetNodeKeys(ctx, b.o.cs, node, kube.NodeChange{Annotations: map[string]*string{AnnSuspendPace: ptr.To(p.String())}})
		return err
	}
	return e
}

// record writes AnnMovingTo and adds the residents f shows to
// AnnResidents, when either is missing.
func (b *nodeBuilder) record(ctx context.Context, f nodeFacts) error {
	v, grow := f.toRecord()
	if !grow {
		return nil
	}
	ann := map[string]*string{fleet.AnnMovingTo: ptr.To(f.cfg.To), AnnResidents: ptr.To(v)}
	if f.flipped() {
		// Taking back a node that never left To: no flip will mark it for
		// the verify, so the mark does (the replaced workers must serve).
		ann[fleet.AnnVerifyPending] = ptr.To(f.cfg.To)
	}
	_, err := kube.SetNodeKeys(ctx, b.o.cs, f.node.Name, kube.NodeChange{Annotations: ann})
	return err
}

func (b *nodeBuilder) mark() runbook.Step[nodeFacts] {
	return runbook.Step[nodeFacts]{
		ID: "ate.node.mark", Title: "Record the move",
		Doc: "Annotate the node " + fleet.AnnMovingTo + "=<target version>, with the actors living there in " + AnnResidents +
			", before anything on it changes: from then on the node is known to be half-way from the node itself, and " +
			"the flip reads each recorded actor directly. Before the mark, calls on names that cannot exist prove that " +
			"the control API lets this client drain a worker and list and suspend actors in every atespace the move " +
			"touches; a refusal names what to grant and nothing is written.",
		Done: func(f nodeFacts) (bool, string) {
			switch {
			case f.flipped() && f.markedFrom():
				return false, fmt.Sprintf("node at %s, half-way to %s: taken back", f.cfg.To, f.cfg.From)
			case f.flipped():
				return true, "node at " + f.cfg.To
			case f.markedTo():
				return true, fleet.AnnMovingTo + "=" + f.cfg.To
			}
			return false, fmt.Sprintf("%s=%q; %s", fleet.AnnMovingTo, f.node.Annotations[fleet.AnnMovingTo], f.paceEvidence())
		},
		Guards: []runbook.Guard[nodeFacts]{othersCordonGuard(), visibleGuard(), capacityGuard(), paceGuard()},
		Plan:   nodeFacts.recordChange,
		Act: func(ctx context.Context, f nodeFacts) error {
			// Ask before you mark: the mark is the first write to the
			// node, and a call refused after it leaves the node half-way.
			if err := askFirst(ctx, b.o.api, f.node.Name, f.atespaces()); err != nil {
				return err
			}
			if err := b.record(ctx, f); err != nil {
				return err
			}
			// Annotations only: the pods and the inventory f shows are
			// still current, and the node is the patch's response.
			b.o.saw(f)
			return nil
		},
	}
}

// askFirst proves, with calls that change nothing, that the control API
// lets this client make every call a node's move makes (DrainWorker; in
// every atespace, those given and every one the server lists: ListActors
// and SuspendActor), before the first write to the node; a refusal names
// what to grant.
func askFirst(ctx context.Context, api API, node string, atespaces []string) error {
	refused, _, err := api.ProbeMove(ctx, atespaces)
	if err != nil || len(refused) == 0 {
		return err
	}
	var calls []string
	for _, r := range refused {
		calls = append(calls, r.String())
	}
	list := strings.Join(calls, ", ")
	return runbook.Blocked(fmt.Errorf("the control API's authorization refuses this client %s, which moving node %s needs "+
		"(an atespace it may not list hides the actors living there, paused ones too); nothing was written to the node. "+
		"Allow the client's identity (the ate-client ServiceAccount, or the --ate-token-file token's) %s in the API "+
		"server's authorization policy, or use a token that may, then re-run", list, node, list))
}

func (b *nodeBuilder) drain() runbook.Step[nodeFacts] {
	return runbook.Step[nodeFacts]{
		ID: "ate.node.drain", Title: "Drain the node's workers",
		Doc: "Call DrainWorker for every worker on the node: bound actors keep running, but no new actor is placed there. " +
			"Idempotent; NotFound (the pod is gone) is fine. There is no undrain. A worker pod of the pools the node leaves " +
			"that has not registered within --register-timeout holds no actor and cannot be drained: the node is cordoned " +
			"(so its pool replaces it elsewhere) and the pod deleted, each pod's worker read just before.",
		Done: func(f nodeFacts) (bool, string) {
			if f.flipped() {
				return true, "node at " + f.cfg.To
			}
			u, unreg := f.undrained(), f.unregistered()
			return f.drained(), fmt.Sprintf("%d of %d worker(s) not draining, %d worker pod(s) not registered", len(u),
				len(f.workers()), len(unreg))
		},
		Guards: []runbook.Guard[nodeFacts]{visibleGuard(), capacityGuard(), paceGuard()},
		Plan: func(f nodeFacts) []runbook.Change {
			out := f.recordChange()
			for _, w := range f.undrained() {
				out = append(out, runbook.Change{Object: "worker/" + w.Name, Action: "DrainWorker",
					Detail: "pod " + w.Pod + ", pool " + w.Pool})
			}
			return append(out, unregisteredPlan(f)...)
		},
		Act: func(ctx context.Context, f nodeFacts) error {
			if err := b.record(ctx, f); err != nil {
				return err
			}
			return b.evacuation(nil).drain(ctx, f.node, f.undrained())
		},
		Wait: func(ctx context.Context, f nodeFacts) error {
			// Each round reads the inventory and the node's pods again.
			return b.evacuation(func(ctx context.Context, _ nodeFacts) (nodeFacts, error) {
				return b.o.read(ctx, f.node.Name, partPods|partInv)
			}).waitDrained(ctx, f)
		},
	}
}

// unregisteredPlan is what clearUnregistered would do to the pods f shows
// unregistered, should they stay so for --register-timeout.
func unregisteredPlan(f nodeFacts) []runbook.Change {
	stuck := f.unregisteredPods()
	if len(stuck) == 0 {
		return nil
	}
	const cond = "only if not registered within --register-timeout"
	out := []runbook.Change{{Object: "node/" + f.node.Name, Action: "cordon", Detail: cond + "; the flip lifts it"}}
	for _, p := range stuck {
		out = append(out, runbook.Change{Object: "pod/" + p.Namespace + "/" + p.Name, Action: "delete", Detail: cond})
	}
	return out
}

func (b *nodeBuilder) suspend() runbook.Step[nodeFacts] {
	return runbook.Step[nodeFacts]{
		ID: "ate.node.suspend", Title: "Suspend every actor on the node",
		Doc: "Suspend the actors bound to the node's workers and the paused actors whose local snapshot is on the node, a " +
			"few at a time; repeat until none is left (traffic may wake actors meanwhile), then drain again so workers " +
			"registered since are covered. A CRASHED actor stops the run: revert it (kubectl ate revert) or pass --revert-crashed. " +
			"Each suspend is timed (SuspendActor to SUSPENDED; the pace is recorded as " + AnnSuspendPace + "); once the actors " +
			"left, at that pace and --max-concurrent-suspends at a time, cannot be suspended within what is left of " +
			"--suspend-timeout, the run stops (blocked) with the numbers instead of spending the budget.",
		Timeout: b.cfg.SuspendTimeout,
		Guards:  []runbook.Guard[nodeFacts]{visibleGuard()},
		Done: func(f nodeFacts) (bool, string) {
			if f.flipped() {
				return true, "node at " + f.cfg.To
			}
			if f.empty() {
				return true, "no actor lives on the node"
			}
			live, crashed := f.residents()
			return false, fmt.Sprintf("%d live and %d crashed actor(s) on the node, %d unregistered worker pod(s); %s",
				len(live), len(crashed), len(f.unregistered()), f.paceEvidence())
		},
		Plan: func(f nodeFacts) []runbook.Change {
			live, crashed := f.residents()
			return append(append(f.recordChange(), suspendPlan(live, crashed)...), unregisteredPlan(f)...)
		},
		Act: func(ctx context.Context, f nodeFacts) error {
			// Each round reads the inventory; the node's pods only when it
			// shows the node empty of actors (the round may end the step:
			// the pods say whether a worker pod has yet to register) or the
			// last read showed such a pod.
			return b.pacedEvacuation(f, func(ctx context.Context, prev nodeFacts) (nodeFacts, error) {
				g, err := b.o.read(ctx, f.node.Name, partInv)
				if err != nil {
					return g, err
				}
				live, crashed := g.residents()
				if len(prev.unregistered()) > 0 || len(live)+len(crashed)+len(g.undrained())+len(g.hosting()) == 0 {
					return b.o.read(ctx, f.node.Name, partPods)
				}
				return g, nil
			}).empty(ctx, f)
		},
	}
}

func (b *nodeBuilder) release() runbook.Step[nodeFacts] {
	return runbook.Step[nodeFacts]{
		ID: "ate.node.release", Title: "Lift the flip's cordon and the moving mark",
		Doc: "Uncordon the node if the flip's cordon is still on, and remove " + fleet.AnnMovingTo + " (the flip does both in its " +
			"patch; this is for a run stopped in between). A cordon someone else set is left alone.",
		Done: func(f nodeFacts) (bool, string) {
			if !f.flipped() {
				return false, "node not flipped yet"
			}
			return !f.ourCordon() && !f.marked(), fmt.Sprintf("cordoned by rollbook %v, %s set %v", f.ourCordon(),
				fleet.AnnMovingTo, f.marked())
		},
		Plan: func(f nodeFacts) []runbook.Change {
			var out []runbook.Change
			if f.ourCordon() {
				out = append(out, runbook.Change{Object: "node/" + f.node.Name, Action: "uncordon"})
			}
			if f.marked() {
				out = append(out, runbook.Change{Object: "node/" + f.node.Name, Action: "annotate",
					Detail: fleet.AnnMovingTo + "-, " + AnnResidents + "-"})
			}
			return out
		},
		Act: func(ctx context.Context, f nodeFacts) error {
			if _, err := kube.UncordonNode(ctx, b.o.cs, b.rec, f.node, CordonOwner); err != nil {
				return err
			}
			if !f.marked() {
				return nil
			}
			_, err := kube.SetNodeKeys(ctx, b.o.cs, f.node.Name, kube.NodeChange{Annotations: map[string]*string{fleet.AnnMovingTo: nil,
				AnnResidents: nil}})
			return err
		},
	}
}

// The node runbook's own bookkeeping on a node it moves, besides the marks
// the fleet read model shows (fleet.AnnMovingTo, fleet.AnnVerifyPending).
const (
	// AnnResidents lists ("atespace/name,…") every actor an observation of
	// the node's move saw living there. The flip reads each one with
	// GetActor: an actor that (soft) lists leave out in every later look is
	// still read.
	AnnResidents = "rollbook.dev/ate-residents"
	// CordonOwner owns the short cordon around the flip (kube.CordonNode).
	CordonOwner = "ate-node"
)
