package ate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// AnnMovingTo marks a node whose move has begun with the version it moves
// to. It is written before the first DrainWorker, so the node in progress is
// known from the node itself, not only from its DRAINING workers in a
// (soft) worker list that may leave them out.
const AnnMovingTo = "rollbook.dev/ate-moving-to"

// AnnVerifyPending marks a flipped node that has not yet shown it serves
// the version it moved to (value: that version). The flip's patch writes
// it; the verify step removes it once the node serves. Until then the node
// is half-moved: the next call finishes it before taking another node, so
// a canary that never brought up a new worker cannot let the roll go on.
const AnnVerifyPending = "rollbook.dev/ate-verify-pending"

// AnnResidents lists ("atespace/name,…") every actor an observation of the
// node's move saw living there. The flip reads each one with GetActor: an
// actor that (soft) lists leave out in every later look is still read.
const AnnResidents = "rollbook.dev/ate-residents"

// CordonOwner owns the short cordon around the flip (kube.CordonNode).
const CordonOwner = "ate-node"

// Sides says which way a node moves: roll is OLD → NEW, rollback the mirror.
type Sides struct {
	From, To  string
	ToAtelet  string // the DaemonSet of To
	FromPools []Pool
	ToPools   []Pool
	NodesAtTo map[string]bool
	FirstNode bool // no node is at To yet: no capacity to require
	// Lineage maps each serving pool's and its clone's key to the serving
	// pool's key (see Lineages).
	Lineage map[string]string
}

// NodeConfig tunes moving a node.
type NodeConfig struct {
	Sides
	MaxConcurrentSuspends int
	SuspendInterval       time.Duration
	RevertCrashed         bool
	SuspendTimeout        time.Duration
	AteletTimeout         time.Duration
	VerifyTimeout         time.Duration
	// RegisterTimeout bounds the wait for a worker pod on the node to
	// register as a worker before the flip; then the run stops blocked.
	RegisterTimeout time.Duration
	RunID           string
}

// API is the part of the substrate client the node runbook uses.
type API interface {
	Inventory(ctx context.Context) (*ateapi.Inventory, error)
	DrainWorker(ctx context.Context, name string) (ateapi.Worker, error)
	GetActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
	SuspendActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
	RevertActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
}

type nodeFacts struct {
	cfg  *NodeConfig
	node *corev1.Node
	pods []corev1.Pod
	inv  *ateapi.Inventory
}

func (f nodeFacts) flipped() bool { return f.node.Labels[VersionLabel] == f.cfg.To }

// verifyPending: flipped, and not yet shown to serve the target version.
func (f nodeFacts) verifyPending() bool { return f.node.Annotations[AnnVerifyPending] == f.cfg.To }

// podsOf returns the pods on the node that belong to pools.
func (f nodeFacts) podsOf(pools []Pool) []corev1.Pod {
	set := poolSet(pools)
	var out []corev1.Pod
	for _, p := range f.pods {
		if pool, ok := p.Labels[PoolLabel]; ok && set[p.Namespace+"/"+pool] && !kube.PodTerminal(&p) {
			out = append(out, p)
		}
	}
	return out
}

func (f nodeFacts) workers() []ateapi.Worker { return f.inv.WorkersOnNode(f.node.Name) }

func (f nodeFacts) undrained() []ateapi.Worker {
	var out []ateapi.Worker
	for _, w := range f.workers() {
		if w.State != ateapi.WorkerDraining {
			out = append(out, w)
		}
	}
	return out
}

// residents are the actors that must be suspended before the flip: bound
// to a worker on the node, or paused with their local state on it. The
// workers' own assignments are cross-checked: an actor a worker says it
// hosts counts even when the (soft) actor list missed it. Crashed ones are
// returned apart: suspend refuses them.
func (f nodeFacts) residents() (live, crashed []ateapi.Actor) {
	onNode := map[string]bool{}
	for _, w := range f.workers() {
		onNode[w.Name] = true
	}
	seen := map[ateapi.ActorRef]bool{}
	for _, a := range f.inv.Actors {
		if seen[a.Ref()] || a.State == ateapi.ActorSuspended {
			continue
		}
		bound := a.Worker != "" && onNode[a.Worker]
		pinned := a.Worker == "" && (a.AssignedNode == f.node.Name || contains(a.SnapshotNodes, f.node.Name))
		if !bound && !pinned {
			continue
		}
		seen[a.Ref()] = true
		if a.State == ateapi.ActorCrashed {
			crashed = append(crashed, a)
		} else {
			live = append(live, a)
		}
	}
	listed := map[ateapi.ActorRef]bool{}
	for _, a := range f.inv.Actors {
		listed[a.Ref()] = true
	}
	for _, w := range f.workers() {
		for _, r := range w.Actors {
			if !listed[r] && !seen[r] {
				seen[r] = true
				live = append(live, ateapi.Actor{Atespace: r.Atespace, Name: r.Name, State: ateapi.ActorUnspecified, Worker: w.Name,
					Node: w.Node})
			}
		}
	}
	return live, crashed
}

// drained: every worker the node shows is draining, and it shows some when
// worker pods run there (a list may leave out workers that just changed).
// A pod that registers later is drained by the suspend step, and the flip
// waits for it.
func (f nodeFacts) drained() bool {
	return len(f.undrained()) == 0 && (len(f.workers()) > 0 || len(f.podsOf(f.cfg.FromPools)) == 0)
}

// hosting are the node's workers that say they host an actor.
func (f nodeFacts) hosting() []string {
	var out []string
	for _, w := range f.workers() {
		if w.Hosts() {
			out = append(out, w.Name+" (pod "+w.Pod+")")
		}
	}
	return out
}

// fromHosted are the actors the delete step would crash: bound to a worker
// of the pools the node leaves, or named by such a worker. Paused actors
// pinned to the node and actors on the target pools' workers live under
// the new atelet and do not block the delete.
func (f nodeFacts) fromHosted() []string {
	from := poolSet(f.cfg.FromPools)
	fromWorker := map[string]bool{}
	var out []string
	for _, w := range f.workers() {
		if from[w.PoolKey()] {
			fromWorker[w.Name] = true
			if w.Hosts() {
				out = append(out, "worker "+w.Name+" (pod "+w.Pod+")")
			}
		}
	}
	for _, a := range f.inv.Actors {
		if a.State != ateapi.ActorSuspended && fromWorker[a.Worker] {
			out = append(out, "actor "+a.Ref().String())
		}
	}
	return out
}

// moved: the node finished moving to cfg.To — flipped, seen to serve,
// unmarked, uncordoned, no pod of the pools it left on it. Every step
// counts as done then (the runbook's commit point): a later restart of its
// atelet does not make a finished node half-way.
func (f nodeFacts) moved() bool {
	return f.flipped() && !f.verifyPending() && !f.marked() && !f.ourCordon() && len(f.podsOf(f.cfg.FromPools)) == 0
}

func (f nodeFacts) ourCordon() bool { return kube.CordonStateOf(f.node).Owner == CordonOwner }

// marked: the node carries this move's mark — AnnMovingTo naming cfg.To,
// or the residents record alone. A mark naming the other version is the
// other way's move (a node half-way there), not this one's to lift.
func (f nodeFacts) marked() bool {
	to, moving := f.node.Annotations[AnnMovingTo]
	_, seen := f.node.Annotations[AnnResidents]
	return moving && to == f.cfg.To || !moving && seen
}

// toRecord is AnnResidents with the residents f shows added, and whether it
// (or the moving mark) has to be written.
func (f nodeFacts) toRecord() (string, bool) {
	set := map[string]bool{}
	for _, r := range strings.Split(f.node.Annotations[AnnResidents], ",") {
		if r != "" {
			set[r] = true
		}
	}
	n := len(set)
	live, crashed := f.residents()
	for _, a := range append(live, crashed...) {
		set[a.Ref().String()] = true
	}
	all := make([]string, 0, len(set))
	for r := range set {
		all = append(all, r)
	}
	sort.Strings(all)
	return strings.Join(all, ","), len(set) > n || f.node.Annotations[AnnMovingTo] != f.cfg.To
}

// recorded are the actors AnnResidents names.
func (f nodeFacts) recorded() []ateapi.ActorRef {
	var out []ateapi.ActorRef
	for _, r := range strings.Split(f.node.Annotations[AnnResidents], ",") {
		if ns, name, ok := strings.Cut(r, "/"); ok {
			out = append(out, ateapi.ActorRef{Atespace: ns, Name: name})
		}
	}
	return out
}

func (f nodeFacts) recordChange() []runbook.Change {
	v, grow := f.toRecord()
	if !grow {
		return nil
	}
	return []runbook.Change{{Object: "node/" + f.node.Name, Action: "annotate",
		Detail: AnnMovingTo + "=" + f.cfg.To + ", " + AnnResidents + "=" + v}}
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

func flipGuards() []runbook.Guard[nodeFacts] {
	return []runbook.Guard[nodeFacts]{
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
				"suspend it", short(h))
		}},
		{Name: "every worker pod on the node is a registered, draining worker", Check: func(f nodeFacts) (bool, string) {
			u := f.unregistered()
			return len(u) == 0, fmt.Sprintf("worker pod(s) %s on the node are not registered as workers yet, so they could "+
				"not be drained; re-run once they register (kubectl ate status)", short(u))
		}},
	}
}

// unregistered are the worker pods of the pools the node leaves that sit on
// the node with no registered worker: the syncer registers a pod some time
// after it runs, and an unregistered worker can still be handed an actor.
func (f nodeFacts) unregistered() []string {
	known := map[string]bool{}
	for _, w := range f.inv.Workers {
		known[w.Name] = true
	}
	var out []string
	for _, p := range f.podsOf(f.cfg.FromPools) {
		if !known[string(p.UID)] && p.DeletionTimestamp == nil {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

// capacity weighs the node's live actors against free workers elsewhere.
func (f nodeFacts) capacity() ([]Need, bool) {
	live, _ := f.residents()
	return Capacity(f.inv, f.cfg.Lineage, f.node.Name, live)
}

func (f nodeFacts) ateletReady() (bool, string) {
	for _, p := range f.pods {
		if p.Labels[AppLabel] == AteletApp && p.Labels[VersionLabel] == f.cfg.To {
			if kube.PodReady(&p) {
				return true, "atelet " + p.Name + " Ready"
			}
			return false, "atelet " + p.Name + " is " + string(p.Status.Phase)
		}
	}
	return false, "no atelet for " + f.cfg.To + " on the node yet"
}

// toPodsReady counts the target pools' pods on the node and the Ready ones.
func (f nodeFacts) toPodsReady() (ready, total int) {
	for _, p := range f.podsOf(f.cfg.ToPools) {
		total++
		if kube.PodReady(&p) {
			ready++
		}
	}
	return ready, total
}

// toMustServeHere reports that the target pools want workers but none is
// ACTIVE on another node (the canary, or every earlier one lost its own):
// the node has moved only once one serves here, or the roll would go on
// with the target version serving nowhere.
func (f nodeFacts) toMustServeHere() bool {
	var desired int64
	for _, p := range f.cfg.ToPools {
		desired += p.Desired
	}
	if desired == 0 {
		return false
	}
	to := poolSet(f.cfg.ToPools)
	for _, w := range f.inv.Workers {
		if to[w.PoolKey()] && w.State == ateapi.WorkerActive && w.Node != f.node.Name {
			return false
		}
	}
	return true
}

// toVerified is the verify step's verdict on pods and workers as shown.
func (f nodeFacts) toVerified() (bool, string) {
	ready, total := f.toPodsReady()
	active := f.toWorkersActive()
	why := fmt.Sprintf("%d of %d %s worker pod(s) on the node Ready, %d registered ACTIVE", ready, total, f.cfg.To, active)
	if ready == total && active == 0 && f.toMustServeHere() {
		return false, why + "; no " + f.cfg.To + " worker is ACTIVE on any other node, so one must come up here " +
			"(the target pools' pods are Pending until the scheduler places them)"
	}
	return ready == total && active >= ready, why
}

func (f nodeFacts) toWorkersActive() int {
	to := poolSet(f.cfg.ToPools)
	n := 0
	for _, w := range f.workers() {
		if to[w.PoolKey()] && w.State == ateapi.WorkerActive {
			n++
		}
	}
	return n
}

// capacityGuard holds the node's move until its actors have somewhere to
// resume: enough free workers of each pool lineage on other nodes.
func capacityGuard() runbook.Guard[nodeFacts] {
	return runbook.Guard[nodeFacts]{
		Name: "enough free workers of each pool lineage on other nodes for the node's actors",
		Check: func(f nodeFacts) (bool, string) {
			if f.cfg.FirstNode {
				return true, ""
			}
			needs, ok := f.capacity()
			return ok, "not enough free ACTIVE workers for the actors this node would suspend (" + describeNeeds(needs) +
				"); they would have nowhere to resume. Wait for workers to free up (kubectl ate status), or pass --wait"
		},
	}
}

// drainingFrom: the node's workers of the pools it leaves are all DRAINING
// (at least one) — the node was drained as a whole, as a move drains it,
// whether or not the move's mark was written (an older rollbook, a drain
// by hand). There is no undrain, so such a node must be finished. One
// worker drained among live ones (a health check's, recover-node's) is not
// a move. Only those pools' workers count (one of a deleted or unrelated
// pool may be draining for reasons of its own), and only those whose pod
// is still on the node: a deleted pod's worker stays DRAINING through the
// eviction window, after its node moved (and maybe moved back).
func (f nodeFacts) drainingFrom() bool {
	live := map[string]bool{}
	for _, p := range f.podsOf(f.cfg.FromPools) {
		if p.DeletionTimestamp == nil {
			live[string(p.UID)] = true
		}
	}
	from := poolSet(f.cfg.FromPools)
	draining, active := 0, 0
	for _, w := range f.workers() {
		if !from[w.PoolKey()] || !live[w.Name] {
			continue
		}
		if w.State == ateapi.WorkerDraining {
			draining++
		} else {
			active++
		}
	}
	return draining > 0 && active == 0
}

// NodeRunbookName owns the timers of moving nodes.
const NodeRunbookName = "ate-node"

// NodeRunbook moves one node from cfg.From to cfg.To — the runbook's step 5
// a–f for a roll, and the same with the sides swapped for a rollback.
func NodeRunbook(cs kubernetes.Interface, api API, rec kube.Recorder, cfg *NodeConfig) *runbook.Runbook[nodeFacts] {
	return nodeRunbook(newNodeObserver(cs, api, cfg), rec)
}

func nodeRunbook(o *nodeObserver, rec kube.Recorder) *runbook.Runbook[nodeFacts] {
	cs, api, cfg := o.cs, o.api, o.cfg
	return &runbook.Runbook[nodeFacts]{
		Name:  NodeRunbookName,
		Title: "Move one Agent Substrate node to another version",
		Doc: `Drain every worker on the node, suspend every actor living there (bound to its workers,
or paused with local state on it) until none is left, re-drain, flip the node's
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
		Notes: func(f nodeFacts) []string {
			live, crashed := f.residents()
			var notes []string
			if !f.flipped() && len(f.workers()) > len(f.undrained()) {
				notes = append(notes, fmt.Sprintf("workers on %s are DRAINING (there is no undrain); re-run to finish moving the "+
					"node", f.node.Name))
			}
			if len(live)+len(crashed) > 0 && !f.flipped() {
				notes = append(notes, fmt.Sprintf("%d actor(s) still live on %s", len(live)+len(crashed), f.node.Name))
			}
			return notes
		},
		Steps: []runbook.Step[nodeFacts]{
			{
				ID: "ate.node.mark", Title: "Record the move on the node",
				Doc: "Write " + AnnMovingTo + "=<target version> and the actors living on the node (" + AnnResidents + ") before " +
					"anything on it changes. From then on the node is half-way — known from the node itself, not only from its " +
					"DRAINING workers in a worker list that may leave them out — and every later run finishes it first.",
				Done: func(f nodeFacts) (bool, string) {
					switch {
					case f.flipped():
						return true, "node at " + f.cfg.To
					case f.node.Annotations[AnnMovingTo] == f.cfg.To:
						return true, AnnMovingTo + "=" + f.cfg.To
					case f.drainingFrom():
						// There is no undrain: a node whose workers drain is
						// being moved, mark or not.
						return true, "workers of the pools it leaves are DRAINING"
					}
					return false, AnnMovingTo + "=" + f.node.Annotations[AnnMovingTo]
				},
				Guards: []runbook.Guard[nodeFacts]{capacityGuard()},
				Plan:   func(f nodeFacts) []runbook.Change { return f.recordChange() },
				Act: func(ctx context.Context, f nodeFacts) error {
					if err := record(ctx, cs, f); err != nil {
						return err
					}
					// Only the node changed, and its write's response is the
					// node: the facts stand as the step's result (no re-read
					// of the pods and the inventory a moment later).
					o.keep(f)
					return nil
				},
			},
			{
				ID: "ate.node.drain", Title: "Drain the node's workers",
				Doc: "Call DrainWorker for every worker on the node: bound actors keep running, but no new actor is placed there. " +
					"Idempotent; NotFound (the pod is gone) is fine. There is no undrain.",
				Done: func(f nodeFacts) (bool, string) {
					if f.flipped() {
						return true, "node at " + f.cfg.To
					}
					u, unreg := f.undrained(), f.unregistered()
					return f.drained() && f.node.Annotations[AnnMovingTo] == f.cfg.To, fmt.Sprintf("%d of %d worker(s) not "+
						"draining, %d worker pod(s) not registered, %s=%q", len(u), len(f.workers()), len(unreg), AnnMovingTo,
						f.node.Annotations[AnnMovingTo])
				},
				Guards: []runbook.Guard[nodeFacts]{capacityGuard()},
				Plan: func(f nodeFacts) []runbook.Change {
					out := f.recordChange()
					for _, w := range f.undrained() {
						out = append(out, runbook.Change{Object: "worker/" + w.Name, Action: "DrainWorker",
							Detail: "pod " + w.Pod + ", pool " + w.Pool})
					}
					return out
				},
				Act: func(ctx context.Context, f nodeFacts) error {
					if err := record(ctx, cs, f); err != nil {
						return err
					}
					return drainWorkers(ctx, api, rec, f.node, f.undrained())
				},
				Wait: func(ctx context.Context, f nodeFacts) error {
					prev := f
					refresh := func(ctx context.Context) (g nodeFacts, err error) {
						g, err = o.refresh(ctx, prev, func(nodeFacts) bool { return true })
						prev = g
						return g, err
					}
					return waitDrained(ctx, api, rec, f, refresh, o.keep)
				},
			},
			{
				ID: "ate.node.suspend", Title: "Suspend every actor on the node",
				Doc: "Suspend the actors bound to the node's workers and the paused actors whose local snapshot is on the node, a " +
					"few at a time; repeat until none is left (traffic may wake actors meanwhile), then drain again so workers " +
					"registered since are covered. A CRASHED actor stops the run: revert it (kubectl ate revert) or pass --revert-crashed.",
				Timeout: cfg.SuspendTimeout,
				Done: func(f nodeFacts) (bool, string) {
					if f.flipped() {
						return true, "node at " + f.cfg.To
					}
					live, crashed := f.residents()
					if len(live)+len(crashed) == 0 && len(f.undrained()) == 0 && len(f.unregistered()) == 0 && len(f.hosting()) == 0 {
						return true, "no actor lives on the node"
					}
					return false, fmt.Sprintf("%d live and %d crashed actor(s) on the node, %d unregistered worker pod(s)",
						len(live), len(crashed), len(f.unregistered()))
				},
				Plan: func(f nodeFacts) []runbook.Change {
					live, crashed := f.residents()
					return append(f.recordChange(), suspendPlan(live, crashed)...)
				},
				Act: func(ctx context.Context, f nodeFacts) error {
					// Each round reads the inventory; the node's pods only
					// when it shows the node empty of actors (the round may
					// end the step: the pods say whether a worker pod has
					// yet to register) or the last read showed such a pod.
					prev := f
					refresh := func(ctx context.Context) (g nodeFacts, err error) {
						g, err = o.refresh(ctx, prev, func(g nodeFacts) bool {
							live, crashed := g.residents()
							return len(prev.unregistered()) > 0 ||
								len(live)+len(crashed)+len(g.undrained())+len(g.hosting()) == 0
						})
						prev = g
						return g, err
					}
					return emptyNodeRecording(ctx, api, rec, f, refresh,
						func(ctx context.Context, f nodeFacts) error { return record(ctx, cs, f) }, o.keep)
				},
			},
			{
				ID: "ate.node.flip", Title: "Flip the node's version label",
				Doc: "Cordon the node, look at it again, and only if that look finds it empty set ate.dev/substrate-version to the " +
					"target version, lifting the cordon, removing " + AnnMovingTo + " and marking the node " + AnnVerifyPending +
					" (until the verify step sees it serve) in the same patch (made at the node's " +
					"version of the look; without the cordon by then, no flip). The old atelet pod leaves on its own and the new one " +
					"starts.",
				Done: func(f nodeFacts) (bool, string) {
					return f.flipped(), VersionLabel + "=" + f.node.Labels[VersionLabel]
				},
				Guards: flipGuards(),
				Plan: func(f nodeFacts) []runbook.Change {
					n := "node/" + f.node.Name
					return []runbook.Change{{Object: n, Action: "cordon", Detail: "while the flip is decided and made"},
						{Object: n, Action: "label", Detail: VersionLabel + "=" + f.cfg.To},
						{Object: n, Action: "uncordon", Detail: "in the label's patch"},
						{Object: n, Action: "annotate", Detail: AnnMovingTo + "-, " + AnnResidents + "-, " + AnnVerifyPending + "=" +
							f.cfg.To + " (in the label's patch)"}}
				},
				Act: func(ctx context.Context, f nodeFacts) error {
					return flipNode(ctx, o, rec, f)
				},
			},
			{
				ID: "ate.node.release", Title: "Lift the flip's cordon and the moving mark",
				Doc: "Uncordon the node if the flip's cordon is still on, and remove " + AnnMovingTo + " (the flip does both in its " +
					"patch; this is for a run stopped in between). A cordon someone else set is left alone.",
				Done: func(f nodeFacts) (bool, string) {
					if !f.flipped() {
						return false, "node not flipped yet"
					}
					return !f.ourCordon() && !f.marked(), fmt.Sprintf("cordoned by rollbook %v, %s set %v", f.ourCordon(),
						AnnMovingTo, f.marked())
				},
				Plan: func(f nodeFacts) []runbook.Change {
					var out []runbook.Change
					if f.ourCordon() {
						out = append(out, runbook.Change{Object: "node/" + f.node.Name, Action: "uncordon"})
					}
					if f.marked() {
						out = append(out, runbook.Change{Object: "node/" + f.node.Name, Action: "annotate",
							Detail: AnnMovingTo + "-, " + AnnResidents + "-"})
					}
					return out
				},
				Act: func(ctx context.Context, f nodeFacts) error {
					if _, err := kube.UncordonNode(ctx, cs, rec, f.node, CordonOwner); err != nil {
						return err
					}
					if !f.marked() {
						return nil
					}
					_, err := kube.SetNodeKeys(ctx, cs, f.node.Name, kube.NodeChange{Annotations: map[string]*string{AnnMovingTo: nil,
						AnnResidents: nil}})
					return err
				},
			},
			{
				ID: "ate.node.atelet-ready", Title: "Wait for the atelet of the target version",
				Doc: "Wait until the target version's atelet pod on the node is Ready. It stays Pending while the old one exits, " +
					"because the old one holds the node's host ports.",
				Timeout: cfg.AteletTimeout,
				Done: func(f nodeFacts) (bool, string) {
					if !f.flipped() {
						return false, "node not flipped yet"
					}
					if f.moved() {
						return true, "node moved to " + f.cfg.To
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
					// The node's pods are watched, all of them, by the watch
					// the delete and verify waits go on with: what it shows
					// once the atelet is Ready is the step's look at them (the
					// next step deletes from it).
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
								if g.inv, err = api.Inventory(ctx); err == nil {
									o.keep(g)
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
						return fmt.Errorf("the %s atelet on %s is not Ready: %w. If its log says the image cache \"has layout version\" "+
							"it does not support, clear /var/lib/ate/image-cache on the node (kubectl debug node/%s --image=busybox -- "+
							"rm -rf /host/var/lib/ate/image-cache) and delete the atelet pod", f.cfg.To, f.node.Name, context.Cause(ctx),
							f.node.Name)
					}
					return err
				},
			},
			{
				ID: "ate.node.delete-old-pods", Title: "Delete the node's worker pods of the version it left",
				Doc: "Delete the node's pods of the pools pinned to the version the node left. They are empty (every actor was " +
					"suspended) but still hold capacity; their Deployment cannot put them back on this node any more. Never before the " +
					"flip: the old pool would reschedule them next to the new atelet.",
				Done: func(f nodeFacts) (bool, string) {
					left := f.podsOf(f.cfg.FromPools)
					return f.flipped() && len(left) == 0, fmt.Sprintf("%d pod(s) of the %s pools on the node", len(left), f.cfg.From)
				},
				Guards: []runbook.Guard[nodeFacts]{
					{Name: "the node's version label is already the target version", Check: func(f nodeFacts) (bool, string) {
						return f.flipped(), "the node still carries " + VersionLabel + "=" + f.node.Labels[VersionLabel] +
							"; deleting its worker pods now would bring them straight back next to the other atelet"
					}},
					{Name: "no actor lives on the node's workers of the pools it left", Check: func(f nodeFacts) (bool, string) {
						h := f.fromHosted()
						return len(h) == 0, fmt.Sprintf("%s on the workers of the %s pools; deleting their pods would crash them. "+
							"Suspend them and re-run", short(h), f.cfg.From)
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
					// Residents are read again right before deleting: a pod
					// whose worker hosts an actor is never deleted.
					inv, err := api.Inventory(ctx)
					if err != nil {
						return err
					}
					hosts := hostsByWorker(inv)
					var kept []string
					// One Event on the node names every pod deleted (also
					// when a later delete fails), not one per pod.
					deleted := &podNames{}
					defer func() {
						if len(deleted.names) > 0 {
							rec.Record(ctx, kube.NodeRef(f.node), false, "Deleted", fmt.Sprintf("deleted worker pod(s) %s: node %s "+
								"moved to %s; its %s worker pods are no longer needed", strings.Join(deleted.names, ", "), f.node.Name,
								f.cfg.To, f.cfg.From))
						}
					}()
					for _, p := range f.podsOf(f.cfg.FromPools) {
						if a := hosts[string(p.UID)]; a != "" {
							kept = append(kept, p.Namespace+"/"+p.Name+" (hosts "+a+")")
							continue
						}
						_, err := kube.DeleteIfUnchanged(ctx, deleted, cs.CoreV1().Pods(p.Namespace).Delete, kube.PodRef(&p), p.UID, "")
						if err != nil {
							return fmt.Errorf("delete %s/%s: %w", p.Namespace, p.Name, err)
						}
					}
					if len(kept) > 0 {
						return runbook.Blocked(fmt.Errorf("not deleted, their worker hosts an actor: %s. Suspend those actors "+
							"(kubectl ate suspend actor NAME -a ATESPACE) and re-run", strings.Join(kept, ", ")))
					}
					return nil
				},
				Wait: func(ctx context.Context, f nodeFacts) error {
					// Watched until no pod of the pools left is there (a
					// terminating one still counts); the watch's pods, the
					// node as the step found it (nothing here writes it) and
					// a fresh inventory are the step's result.
					g := f
					var err error
					g.pods, err = o.pods(ctx, f.node.Name).until(ctx, func(pods []corev1.Pod) bool {
						h := f
						h.pods = pods
						return len(h.podsOf(f.cfg.FromPools)) == 0
					})
					if err != nil {
						return err
					}
					if g.inv, err = api.Inventory(ctx); err != nil {
						return err
					}
					o.keep(g)
					return nil
				},
			},
			{
				ID: "ate.node.verify", Title: "Verify the node serves the target version",
				Doc: "Confirm no pod of the pools the node left remains there, and that every pod of the target version's pools on " +
					"the node is Ready and registered as an ACTIVE worker. (Pods of the target pools may all run on nodes moved " +
					"earlier: the scheduler, not the roll, places them. When no worker of the target pools is ACTIVE on any " +
					"other node, as on the canary, one must come up here.) Then remove " + AnnVerifyPending + ": until then the " +
					"node is not moved, and the next `roll next-node` finishes it before taking another node.",
				Timeout: cfg.VerifyTimeout,
				Done: func(f nodeFacts) (bool, string) {
					if !f.flipped() || len(f.podsOf(f.cfg.FromPools)) > 0 {
						return false, "not moved yet"
					}
					if !f.verifyPending() {
						return true, "verified: " + AnnVerifyPending + " removed"
					}
					_, why := f.toVerified()
					return false, why
				},
				Plan: func(f nodeFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.node.Name, Action: "annotate",
						Detail: AnnVerifyPending + "- (once the node serves " + f.cfg.To + ")"}}
				},
				Act: func(context.Context, nodeFacts) error { return nil },
				Wait: func(ctx context.Context, f nodeFacts) error {
					defer o.close() // the last step
					if ok, why := f.toVerified(); ok {
						return o.verified(ctx, rec, f, why)
					}
					// The node's pods are watched the whole time (one request)
					// while registration is polled (the substrate API has no
					// watch), gently: the step ends on the pods as the watch
					// shows them then and the inventory just read.
					pw := o.pods(ctx, f.node.Name)
					g := f
					for delay := 100 * time.Millisecond; ; {
						pods, err := pw.now(ctx)
						if err != nil {
							return fmt.Errorf("%s worker pods on %s are not Ready: %w", f.cfg.To, f.node.Name, err)
						}
						g.pods = pods
						ready, total := g.toPodsReady()
						if ready == total {
							if g.inv, err = api.Inventory(ctx); err != nil {
								return err
							}
							if ok, why := g.toVerified(); ok {
								return o.verified(ctx, rec, g, why)
							}
						}
						select {
						case <-ctx.Done():
							if ready < total {
								return fmt.Errorf("%s worker pods on %s are not Ready (%d of %d): %w", f.cfg.To, f.node.Name, ready, total,
									context.Cause(ctx))
							}
							_, why := g.toVerified()
							return fmt.Errorf("%s on %s: %w", why, f.node.Name, context.Cause(ctx))
						case <-pw.changed: // a pod changed: look again
						case <-time.After(delay):
							delay = min(2*delay, 3*time.Second)
						}
					}
				},
			},
		},
	}
}

// record writes AnnMovingTo before anything on the node changes, and adds
// the residents f shows to AnnResidents.
func record(ctx context.Context, cs kubernetes.Interface, f nodeFacts) error {
	v, grow := f.toRecord()
	if !grow {
		return nil
	}
	_, err := kube.SetNodeKeys(ctx, cs, f.node.Name, kube.NodeChange{Annotations: map[string]*string{AnnMovingTo: ptr.To(f.cfg.To),
		AnnResidents: ptr.To(v)}})
	return err
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

// flipNode cordons the node, looks at it a second time, and flips its label
// only if that look agrees the node is empty; then it lifts the cordon. The
// cordon keeps a replacement worker pod from landing on the node between
// the look and the label patch (after the patch the old pools' node
// selectors keep them off). The second look is a fresh read of every list
// (the node itself is the cordon's response, made inside the cordon): one
// (soft) list that missed a paused actor in the observation that found the
// node empty cannot by itself let the flip go.
func flipNode(ctx context.Context, o *nodeObserver, rec kube.Recorder, f nodeFacts) (err error) {
	cs, api := o.cs, o.api
	// The cordon's Event is held until the flip's: a flip that lifts the
	// cordon in its patch says both in one Event (the cordon lasts the few
	// requests of the second look, and while it is on, the node names its
	// owner, run and time in its own annotations); otherwise the Cordoned
	// Event is written before the Uncordoned one, as before.
	held := &heldRecords{}
	flipped := false
	// From the run's latest write to the node (the step clock the engine
	// just cleared), so the cordon's resourceVersion precondition holds.
	if _, err := kube.CordonNode(ctx, cs, held, o.newest(f.node), CordonOwner, f.cfg.RunID); err != nil {
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
		if _, uerr := kube.UncordonNode(uctx, cs, rec, o.newest(node), CordonOwner); uerr != nil {
			err = errors.Join(err, uerr)
		}
		if err == nil && look != nil {
			// The second look, its node brought up to the label patch and
			// the uncordon (keep takes their response): the flip's result.
			o.keep(*look)
		}
	}()
	g, err := o.observe(ctx, f.node.Name)
	if err != nil {
		return err
	}
	look = &g
	node = g.node
	if g.flipped() {
		return nil
	}
	b := g.flipBlockers()
	gone, err := confirmGone(ctx, api, g)
	if err != nil {
		return err
	}
	if b = append(b, gone...); len(b) > 0 {
		// Nothing was flipped; the steps before the flip see to what moved
		// in (a new worker pod is drained, a new resident suspended).
		return runbook.Again(fmt.Errorf("node %s not flipped: a second look found %s; re-run", f.node.Name,
			strings.Join(b, "; ")))
	}
	// One patch flips the label, lifts our cordon and removes the moving
	// mark: the node becomes schedulable only together with the label that
	// keeps the old pools off it. Our cordon gone by then means a pod may
	// have landed after the look: no flip.
	msg := fmt.Sprintf("%s: %s → %s", VersionLabel, f.cfg.From, f.cfg.To)
	n, lifted, err := flipPatch(ctx, cs, g.node, f.cfg.To)
	if err != nil {
		return recordFlipIfApplied(ctx, err, cs, rec, g.node.Name, f.cfg.To, msg)
	}
	node = n
	if lifted {
		if c := held.messages("Cordoned"); c != "" {
			msg = c + " for the flip; " + msg
			held.drop("Cordoned")
		}
		msg += "; uncordoned in the same patch, " + AnnMovingTo + " removed"
	}
	held.flush(ctx, rec) // anything else held, first
	flipped = true
	rec.Record(ctx, kube.NodeRef(n), false, "SubstrateVersionFlipped", msg)
	return nil
}

// recordFlipIfApplied keeps the record of a flip that failed only because
// the run was interrupted mid-request, if the server applied it: the node
// now carries the target version (it did not at the second look).
func recordFlipIfApplied(ctx context.Context, err error, cs kubernetes.Interface, rec kube.Recorder, node, to, msg string) error {
	return kube.RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "SubstrateVersionFlipped", msg,
		func(n *corev1.Node) bool { return n.Labels[VersionLabel] == to })
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

// drainWorkers drains workers one by one and records them in one Event on
// the node (one per pass, naming each worker drained, also when a later
// drain fails): a node's workers are drained together, and one Event per
// worker cost a request each for the same audit line.
func drainWorkers(ctx context.Context, api API, rec kube.Recorder, node *corev1.Node, workers []ateapi.Worker) (err error) {
	var done []string
	defer func() {
		if len(done) > 0 {
			rec.Record(ctx, kube.NodeRef(node), false, "WorkerDrained", fmt.Sprintf("DrainWorker %s: no new actors will be placed "+
				"there", strings.Join(done, ", ")))
		}
	}()
	for _, w := range workers {
		if _, err := api.DrainWorker(ctx, w.Name); err != nil && !errors.Is(err, ateapi.ErrNotFound) {
			return fmt.Errorf("drain worker %s (pod %s): %w", w.Name, w.Pod, err)
		}
		done = append(done, fmt.Sprintf("%s (pod %s, pool %s)", w.Name, w.Pod, w.Pool))
	}
	return nil
}

// nodeObserver reads a node's facts for one node runbook. Every read is
// fresh (the node's pods, the inventory) except the node itself right after
// one of the run's own writes, whose response is the node (nodeWrites).
// A step whose last act was an observation that decides it done keeps that
// observation for the engine's look after the step (look), instead of the
// engine reading the same thing again a moment later.
type nodeObserver struct {
	cs  kubernetes.Interface // remembers node writes
	api API
	cfg *NodeConfig

	mu   sync.Mutex
	kept map[string]nodeFacts
	// seed is the node as the run just listed it, for the first look.
	seed *corev1.Node
	// live watches the node's pods from the wait for the new atelet to the
	// end of the verify: one request for the three waits (pods).
	live     *podWatch
	liveNode string
	stopLive context.CancelFunc
}

// pods returns the live watch of the node's pods, started on first use
// (or again if it stopped); it runs until close.
func (o *nodeObserver) pods(ctx context.Context, node string) *podWatch {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live == nil || o.liveNode != node || o.live.ended() {
		if o.stopLive != nil {
			o.stopLive()
		}
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		o.live, o.liveNode, o.stopLive = startPodWatch(wctx, o.cs, node), node, cancel
	}
	return o.live
}

// begin sets the observer to the next node of a run: its sides (cfg) and
// the node as the run just listed it (seed, nil if not listed in full).
// What it kept or watched of the node before goes.
func (o *nodeObserver) begin(cfg *NodeConfig, seed *corev1.Node) {
	o.close()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cfg, o.seed, o.kept = cfg, seed, nil
}

// close stops the live watch, if any.
func (o *nodeObserver) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopLive != nil {
		o.stopLive()
		o.live, o.stopLive = nil, nil
	}
}

func newNodeObserver(cs kubernetes.Interface, api API, cfg *NodeConfig) *nodeObserver {
	return &nodeObserver{cs: kube.RememberNodeWrites(cs), api: api, cfg: cfg}
}

// observe reads the node (or takes it from the run's last write to it), the
// pods on it and the inventory.
func (o *nodeObserver) observe(ctx context.Context, name string) (nodeFacts, error) {
	f := nodeFacts{cfg: o.cfg}
	w := kube.NodeWritesOf(o.cs)
	if w != nil {
		f.node = w.Take(name)
	}
	o.mu.Lock()
	if f.node == nil && o.seed != nil && o.seed.Name == name {
		f.node = o.seed
	}
	o.seed = nil
	o.mu.Unlock()
	if f.node == nil {
		n, err := o.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return f, err
		}
		f.node = n
	}
	if w != nil {
		w.Observed(f.node)
	}
	var err error
	if f.pods, err = kube.PodsOnNode(ctx, o.cs, name); err != nil {
		return f, err
	}
	f.inv, err = o.api.Inventory(ctx)
	return f, err
}

// refresh is a look during a step that acts in rounds on prev: the
// inventory is read again; the node is prev's, brought up to the run's
// latest write to it (what the rounds decide on the node is rollbook's own
// annotations; whatever they conclude, the flip reads the node again
// inside its cordon); the node's pods are read again when pods says they
// are needed, given the new inventory.
func (o *nodeObserver) refresh(ctx context.Context, prev nodeFacts, pods func(nodeFacts) bool) (nodeFacts, error) {
	f := prev
	if w := kube.NodeWritesOf(o.cs); w != nil {
		if n := w.Take(f.node.Name); n != nil {
			f.node = n
			w.Observed(n)
		}
	}
	var err error
	if f.inv, err = o.api.Inventory(ctx); err != nil {
		return f, err
	}
	if pods(f) {
		f.pods, err = kube.PodsOnNode(ctx, o.cs, f.node.Name)
	}
	return f, err
}

// verified removes the node's AnnVerifyPending now that f shows it serves
// the target version (why), and keeps f, brought up to that write.
func (o *nodeObserver) verified(ctx context.Context, rec kube.Recorder, f nodeFacts, why string) error {
	if _, err := kube.SetNodeKeysRecorded(ctx, o.cs, rec, f.node.Name, kube.NodeChange{
		Annotations: map[string]*string{AnnVerifyPending: nil}}, "NodeVerified", f.cfg.To+" serves here: "+why); err != nil {
		return err
	}
	o.keep(f)
	return nil
}

// keep hands f, an observation made after the step's last change, to the
// engine's next look at the node. The node is brought up to the run's
// latest write to it (a step clock written meanwhile).
func (o *nodeObserver) keep(f nodeFacts) {
	if w := kube.NodeWritesOf(o.cs); w != nil {
		if n := w.Take(f.node.Name); n != nil {
			f.node = n
		}
		w.Observed(f.node)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kept == nil {
		o.kept = map[string]nodeFacts{}
	}
	o.kept[f.node.Name] = f
}

// look is the engine's observation: the one the step kept, if any, else a
// fresh one.
func (o *nodeObserver) look(ctx context.Context, name string) (nodeFacts, error) {
	o.mu.Lock()
	f, ok := o.kept[name]
	delete(o.kept, name)
	o.mu.Unlock()
	if ok {
		// Only the step clock can have been written since (the step kept
		// f after its last change): take its response as the node.
		if w := kube.NodeWritesOf(o.cs); w != nil {
			if n := w.Take(name); n != nil {
				f.node = n
				w.Observed(n)
			}
		}
		return f, nil
	}
	return o.observe(ctx, name)
}

// newest is n or the node as the run's last write to it returned it.
func (o *nodeObserver) newest(n *corev1.Node) *corev1.Node {
	if w := kube.NodeWritesOf(o.cs); w != nil {
		return w.Newest(n)
	}
	return n
}

// hostsByWorker names, per worker, one actor it hosts: from the actor list
// and from the worker's own assignments.
func hostsByWorker(inv *ateapi.Inventory) map[string]string {
	out := map[string]string{}
	for _, w := range inv.Workers {
		if len(w.Actors) > 0 {
			out[w.Name] = w.Actors[0].String()
		} else if w.AllocatedActors > 0 {
			out[w.Name] = fmt.Sprintf("%d actor(s)", w.AllocatedActors)
		}
	}
	for _, a := range inv.Actors {
		if a.Worker != "" && a.State != ateapi.ActorSuspended {
			out[a.Worker] = a.Ref().String()
		}
	}
	return out
}

// emptyNode suspends residents until none is left, then re-drains. Worker
// pods that are not registered yet are waited for (RegisterTimeout), so
// they are drained too; refresh re-reads the node.
func emptyNode(ctx context.Context, api API, rec kube.Recorder, f nodeFacts, refresh func(context.Context) (nodeFacts, error)) error {
	return emptyNodeRecording(ctx, api, rec, f, refresh, nil, nil)
}

// emptyNodeRecording is emptyNode that hands each round's facts to record
// (nil: none) before acting on them: the node roll writes AnnResidents.
// The round that finds the node empty changed nothing after its facts were
// read: keep (nil: none) gets them.
func emptyNodeRecording(ctx context.Context, api API, rec kube.Recorder, f nodeFacts, refresh func(context.Context) (nodeFacts, error),
	record func(context.Context, nodeFacts) error, keep func(nodeFacts)) error {
	var unregisteredSince time.Time
	// Actors suspended here are confirmed one by one with GetActor: a list
	// may miss an actor whose state just changed, and a paused actor still
	// SUSPENDING off the node's atelet is lost if the node flips.
	pending := map[ateapi.ActorRef]bool{}
	for round := 1; ; round++ {
		if err := confirmPending(ctx, api, f.node.Name, pending); err != nil {
			return err
		}
		if record != nil {
			if err := record(ctx, f); err != nil {
				return err
			}
		}
		// Workers registered since the last pass must stop taking actors too.
		if err := drainWorkers(ctx, api, rec, f.node, f.undrained()); err != nil {
			return err
		}
		live, crashed := f.residents()
		if len(crashed) > 0 {
			if !f.cfg.RevertCrashed {
				return runbook.Blocked(fmt.Errorf("%s; no further actor is touched. Revert them (`kubectl ate revert ACTOR -a ATESPACE`, "+
					"loses work since their last snapshot) or re-run with --revert-crashed", describeCrashed(crashed)))
			}
			for _, a := range crashed {
				if _, err := api.RevertActor(ctx, a.Atespace, a.Name); err != nil {
					return fmt.Errorf("revert crashed actor %s/%s: %w", a.Atespace, a.Name, err)
				}
				rec.Record(ctx, kube.NodeRef(f.node), true, "ActorReverted",
					fmt.Sprintf("reverted CRASHED actor %s/%s to its last external snapshot (--revert-crashed)", a.Atespace, a.Name))
			}
		}
		unreg := f.unregistered()
		switch {
		case len(unreg) == 0:
			unregisteredSince = time.Time{}
		case unregisteredSince.IsZero():
			unregisteredSince = time.Now()
		case time.Since(unregisteredSince) > f.cfg.RegisterTimeout:
			return runbook.Blocked(fmt.Errorf("worker pod(s) %s on node %s did not register as workers within %s, so they cannot be "+
				"drained and the node must not flip; re-run once they register (kubectl ate status)", short(unreg), f.node.Name,
				f.cfg.RegisterTimeout))
		}
		if len(live) == 0 && len(crashed) == 0 && len(unreg) == 0 && len(f.undrained()) == 0 && len(f.hosting()) == 0 && len(pending) == 0 {
			if keep != nil {
				keep(f)
			}
			return nil
		}
		var todo []ateapi.Actor
		for _, a := range live {
			// An actor only its worker still names, already asked to
			// suspend, is being confirmed by GetActor: no second request.
			if !pending[a.Ref()] || a.State != ateapi.ActorUnspecified {
				todo = append(todo, a)
			}
			pending[a.Ref()] = true
		}
		if err := suspendAll(ctx, api, rec, f, todo); err != nil {
			return err
		}
		select { // suspends and registrations take a moment; actors keep waking
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Duration(min(round, 10)) * 200 * time.Millisecond):
		}
		g, err := refresh(ctx)
		if err != nil {
			return err
		}
		f = g
	}
}

// waitDrained re-reads the node until every worker pod on it is a
// registered, draining worker: a list may leave out a worker that just
// changed, and a pod registers some time after it runs. Workers that
// appear meanwhile are drained too.
func waitDrained(ctx context.Context, api API, rec kube.Recorder, f nodeFacts, refresh func(context.Context) (nodeFacts, error),
	keep func(nodeFacts)) error {
	deadline := time.Now().Add(f.cfg.RegisterTimeout)
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		select { // Act just drained what f showed: read the node again first
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(delay):
		}
		g, err := refresh(ctx)
		if err != nil {
			return err
		}
		f = g
		if err := drainWorkers(ctx, api, rec, f.node, f.undrained()); err != nil {
			return err
		}
		unreg := f.unregistered()
		if len(f.undrained()) == 0 && len(unreg) == 0 {
			keep(f) // nothing was drained on these facts: they are the step's result
			return nil
		}
		if time.Now().After(deadline) {
			return runbook.Blocked(fmt.Errorf("worker pod(s) %s on node %s did not register as workers within %s, so they cannot be "+
				"drained and the node must not flip; re-run once they register (kubectl ate status)", short(unreg), f.node.Name,
				f.cfg.RegisterTimeout))
		}
	}
}

// confirmPending drops the actors that are SUSPENDED, gone, or no longer on
// node from pending, reading each one directly.
func confirmPending(ctx context.Context, api API, node string, pending map[ateapi.ActorRef]bool) error {
	for r := range pending {
		a, err := api.GetActor(ctx, r.Atespace, r.Name)
		switch {
		case errors.Is(err, ateapi.ErrNotFound):
			delete(pending, r)
		case err != nil:
			return err
		case a.State == ateapi.ActorSuspended || !a.OnNode(node):
			delete(pending, r)
		}
	}
	return nil
}

// suspendAll suspends actors, a few at a time, and records the ones it
// suspended in one Event on the node per round (naming each, with its
// state before and after), written once the round's calls have returned.
func suspendAll(ctx context.Context, api API, rec kube.Recorder, f nodeFacts, actors []ateapi.Actor) error {
	sem := make(chan struct{}, max(1, f.cfg.MaxConcurrentSuspends))
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		errs      []error
		suspended []string
	)
	defer func() {
		wg.Wait()
		if len(suspended) > 0 {
			sort.Strings(suspended)
			rec.Record(ctx, kube.NodeRef(f.node), false, "ActorSuspended", fmt.Sprintf("suspended %s to empty node %s",
				strings.Join(suspended, ", "), f.node.Name))
		}
	}()
	for i, a := range actors {
		if a.State.Transient() && a.State != ateapi.ActorUnspecified {
			continue // it moves on its own; the next round sees where it went
		}
		if i > 0 && f.cfg.SuspendInterval > 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(f.cfg.SuspendInterval):
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			got, err := api.SuspendActor(ctx, a.Atespace, a.Name)
			var ae *ateapi.Error
			switch {
			case err == nil:
				mu.Lock()
				suspended = append(suspended, fmt.Sprintf("%s/%s (was %s, now %s)", a.Atespace, a.Name, a.State, got.State))
				mu.Unlock()
			case errors.Is(err, ateapi.ErrNotFound):
			case errors.Is(err, ateapi.ErrDataLoss):
				// crashed: the next round reports it with the others
			case errors.As(err, &ae) && (ae.ActorState.Transient() || ae.ActorState == ateapi.ActorCrashed):
				// Mid-transition (resuming, suspending…) or crashed: the next round sees it again.
			case errors.Is(err, ateapi.ErrFailedPrecondition):
				state := ateapi.ActorUnspecified
				if ae != nil && ae.ActorState != "" {
					state = ae.ActorState
				}
				mu.Lock()
				errs = append(errs, runbook.Blocked(fmt.Errorf("suspend %s/%s refused: the actor is %s, a state it does not leave on "+
					"its own; "+
					"no further actor is touched. Find out why (kubectl ate get actors -a %s), then "+
					"re-run", a.Atespace, a.Name, state, a.Atespace)))
				mu.Unlock()
			default:
				mu.Lock()
				errs = append(errs, fmt.Errorf("suspend %s/%s: %w", a.Atespace, a.Name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func describeCrashed(actors []ateapi.Actor) string {
	var names []string
	for _, a := range actors {
		s := a.Atespace + "/" + a.Name
		if a.CrashMessage != "" {
			s += " (" + a.CrashMessage + ")"
		}
		names = append(names, s)
	}
	sort.Strings(names)
	return fmt.Sprintf("%d CRASHED actor(s) on the node: %s", len(actors), strings.Join(names, ", "))
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// suspendPlan is what emptying a node does to its residents: suspend the
// live ones; a crashed one blocks until reverted.
func suspendPlan(live, crashed []ateapi.Actor) []runbook.Change {
	var out []runbook.Change
	for _, a := range live {
		out = append(out, runbook.Change{Object: "actor/" + a.Atespace + "/" + a.Name, Action: "SuspendActor", Detail: string(a.State)})
	}
	for _, a := range crashed {
		out = append(out, runbook.Change{Object: "actor/" + a.Atespace + "/" + a.Name, Action: "blocked",
			Detail: "CRASHED: needs RevertActor"})
	}
	return out
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
	marks := []string{AnnMovingTo, AnnResidents, runbook.TimerKey(NodeRunbookName)}
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
			{Op: "add", Path: "/metadata/labels/" + kube.JSONPointerEscape(VersionLabel), Value: to},
			{Op: "add", Path: ann(AnnVerifyPending), Value: to},
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
		c := kube.NodeChange{Labels: map[string]*string{VersionLabel: ptr.To(to)}, Annotations: map[string]*string{
			AnnVerifyPending: ptr.To(to)}}
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

// podNames is a kube.Recorder that only collects the pods recorded
// ("namespace/name (uid …)"), for one Event about them all.
type podNames struct{ names []string }

// Record implements kube.Recorder.
func (p *podNames) Record(_ context.Context, obj corev1.ObjectReference, _ bool, _, _ string) {
	p.names = append(p.names, fmt.Sprintf("%s/%s (uid %s)", obj.Namespace, obj.Name, obj.UID))
}
