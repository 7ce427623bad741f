package node

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// nodeFacts is what the node runbook decides on for one node: the node,
// the pods on it and the substrate's inventory. Every predicate below is
// pure.
type nodeFacts struct {
	cfg  *Config
	node *corev1.Node
	pods []corev1.Pod
	inv  *ateapi.Inventory
	// here, when not nil, are inv's workers on the node, found once for
	// many nodes (Locator) instead of by a scan per look.
	here *[]ateapi.Worker
}

func (f nodeFacts) flipped() bool { return f.node.Labels[fleet.VersionLabel] == f.cfg.To }

// verifyPending: flipped, and not yet shown to serve the target version.
func (f nodeFacts) verifyPending() bool {
	return f.node.Annotations[fleet.AnnVerifyPending] == f.cfg.To
}

// markedTo: the move to cfg.To is recorded on the node (the mark step).
func (f nodeFacts) markedTo() bool { return f.node.Annotations[fleet.AnnMovingTo] == f.cfg.To }

// marked: the node carries this move's mark — AnnMovingTo naming cfg.To,
// or the residents record alone. A mark naming the other version is the
// other way's move (a node half-way there), not this one's to lift.
func (f nodeFacts) marked() bool {
	to, moving := f.node.Annotations[fleet.AnnMovingTo]
	_, seen := f.node.Annotations[AnnResidents]
	return moving && to == f.cfg.To || !moving && seen
}

// markedFrom: the node carries the other way's mark (AnnMovingTo naming
// cfg.From), the record of a move toward the version this move leaves.
// On a node still at cfg.To that move never flipped it: this move takes
// the node back, and its own mark replaces that one.
func (f nodeFacts) markedFrom() bool {
	to, ok := f.node.Annotations[fleet.AnnMovingTo]
	return ok && to == f.cfg.From
}

// takingBack: the node never left cfg.To, and a move the other way is
// recorded on it (the other way's mark, or this one's written over it,
// which leaves AnnVerifyPending naming cfg.To without a flip).
func (f nodeFacts) takingBack() bool {
	return f.flipped() && (f.markedFrom() || f.markedTo() && f.verifyPending())
}

// replacing: the node is at cfg.To by a move not yet verified — taken back
// (takingBack), or flipped to cfg.To and not yet seen to serve — so its
// DRAINING workers of the target pools (stale) are that move's to replace.
// A node that moved and was verified has no move recorded: workers drained
// there afterwards are recover-node's.
func (f nodeFacts) replacing() bool {
	return f.flipped() && (f.takingBack() || f.verifyPending())
}

// stale are the node's DRAINING workers of the pools its version pins
// whose pod still runs there: a move the other way drained them (and
// maybe flipped the node and stopped before deleting their pods: a canary
// whose new atelet never became Ready, rolled back) and there is no
// undrain, so the node serves again only once their pods are replaced.
// After an ordinary flip there are none: the node's workers of the target
// pools are new.
func (f nodeFacts) stale() []ateapi.Worker {
	live := map[string]bool{}
	for _, p := range f.podsOf(f.cfg.ToPools) {
		if p.DeletionTimestamp == nil {
			live[string(p.UID)] = true
		}
	}
	var out []ateapi.Worker
	for _, w := range f.workers() {
		if w.State == ateapi.WorkerDraining && live[w.Name] {
			out = append(out, w)
		}
	}
	return out
}

// staleView is the node narrowed to its stale workers (the evacuation then
// suspends exactly the actors on them, as recover-node's does).
func (f nodeFacts) staleView() nodeFacts {
	return nodeFacts{cfg: &Config{}, node: f.node, inv: narrowTo(f.inv, f.node.Name, f.stale())}
}

func (f nodeFacts) ourCordon() bool { return kube.CordonStateOf(f.node).Owner == CordonOwner }

// moved is the commit point: the node is at cfg.To, verified, unmarked,
// without the flip's cordon and without pods of the pools it left. Every
// step counts as done then, whatever happens to the node's atelet later
// (a restart must not make a finished node half-way).
func (f nodeFacts) moved() bool {
	return f.flipped() && !f.verifyPending() && !f.marked() && !f.ourCordon() && len(f.podsOf(f.cfg.FromPools)) == 0
}

// podsOf returns the pods on the node that belong to pools (terminal ones
// do not count).
func (f nodeFacts) podsOf(pools []fleet.Pool) []corev1.Pod {
	set := fleet.PoolSet(pools)
	var out []corev1.Pod
	for _, p := range f.pods {
		if pool, ok := p.Labels[fleet.PoolLabel]; ok && set[p.Namespace+"/"+pool] && !kube.PodTerminal(&p) {
			out = append(out, p)
		}
	}
	return out
}

func (f nodeFacts) workers() []ateapi.Worker {
	if f.here != nil {
		return *f.here
	}
	return f.inv.WorkersOnNode(f.node.Name)
}

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
	if len(f.undrained()) > 0 {
		return false
	}
	if len(f.workers()) > 0 {
		return true
	}
	for _, p := range f.podsOf(f.cfg.FromPools) {
		if p.DeletionTimestamp == nil { // a pod being deleted takes no actor
			return false
		}
	}
	return true
}

// empty: no actor lives on the node, every worker is draining and
// registered, and none says it hosts an actor (the suspend step's result).
func (f nodeFacts) empty() bool {
	live, crashed := f.residents()
	return len(live)+len(crashed) == 0 && len(f.undrained()) == 0 && len(f.unregistered()) == 0 && len(f.hosting()) == 0
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
	from := fleet.PoolSet(f.cfg.FromPools)
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

// unregistered are the worker pods of the pools the node leaves that sit on
// the node with no registered worker: the syncer registers a pod some time
// after it runs, and an unregistered worker can still be handed an actor.
func (f nodeFacts) unregistered() []string {
	var out []string
	for _, p := range f.unregisteredPods() {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// unregisteredPods are the pods unregistered names.
func (f nodeFacts) unregisteredPods() []corev1.Pod {
	known := map[string]bool{}
	for _, w := range f.inv.Workers {
		known[w.Name] = true
	}
	var out []corev1.Pod
	for _, p := range f.podsOf(f.cfg.FromPools) {
		if _, wrongPlatform := fleet.PullFailure(&p); wrongPlatform {
			continue // its image has no build for this node: it never runs, so it never registers or takes an actor
		}
		if !known[string(p.UID)] && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// capacity weighs the node's live actors against free workers elsewhere.
// Past the flip (a node taken back, or flipped and its drained workers
// still there) only the actors on its drained workers are suspended, and
// the node keeps serving: they may resume on any free slot, its own too.
func (f nodeFacts) capacity() ([]fleet.Need, bool) {
	if f.flipped() {
		live, _ := f.staleView().residents()
		return fleet.Capacity(f.inv, f.cfg.Lineage, "", live)
	}
	live, _ := f.residents()
	return fleet.Capacity(f.inv, f.cfg.Lineage, f.node.Name, live)
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
	return strings.Join(all, ","), len(set) > n || !f.markedTo() || f.flipped() && !f.verifyPending()
}

// atespaces are the atespaces of the node's residents and of the actors
// its workers name: those its move suspends in.
func (f nodeFacts) atespaces() []string {
	set := map[string]bool{}
	live, crashed := f.residents()
	for _, a := range append(live, crashed...) {
		set[a.Atespace] = true
	}
	for _, w := range f.workers() {
		for _, r := range w.Actors {
			set[r.Atespace] = true
		}
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
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

// recordChange is the write record makes on f, if any.
func (f nodeFacts) recordChange() []runbook.Change {
	v, grow := f.toRecord()
	if !grow {
		return nil
	}
	d := fleet.AnnMovingTo + "=" + f.cfg.To + ", " + AnnResidents + "=" + v
	if f.flipped() {
		d += ", " + fleet.AnnVerifyPending + "=" + f.cfg.To + " (taking back a node the move to " + f.cfg.From + " left half-way)"
	}
	return []runbook.Change{{Object: "node/" + f.node.Name, Action: "annotate", Detail: d}}
}

// stranded is the version whose atelet the node's live residents need and
// lack: an actor bound to a worker of a pool pinned to a version other
// than the node's label, with no Ready atelet of that version on the node
// (a label changed by hand). A suspend checkpoints through that atelet, so
// the label must go back first. "" when nothing is stranded, or the
// node's pods were not read (no atelet pod of any version is known).
func (f nodeFacts) stranded() string {
	if f.inv == nil || !f.hasAteletPods() {
		return ""
	}
	pin := map[string]string{}
	for _, p := range append(slices.Clone(f.cfg.FromPools), f.cfg.ToPools...) {
		pin[p.Key()] = p.Pin
	}
	byName := map[string]ateapi.Worker{}
	for _, w := range f.workers() {
		byName[w.Name] = w
	}
	live, _ := f.residents()
	for _, a := range live {
		w, ok := byName[a.Worker]
		v := pin[w.PoolKey()]
		if ok && v != "" && v != f.node.Labels[fleet.VersionLabel] && !f.ateletReadyOf(v) {
			return v
		}
	}
	return ""
}

// notes tells a person what a stopped move left on the node.
func (f nodeFacts) notes() []string {
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
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
