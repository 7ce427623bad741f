package ate

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// nodeFacts is what the node runbook decides on for one node: the node,
// the pods on it and the substrate's inventory. Every predicate below is
// pure.
type nodeFacts struct {
	cfg  *NodeConfig
	node *corev1.Node
	pods []corev1.Pod
	inv  *ateapi.Inventory
	// here, when not nil, are inv's workers on the node, found once for
	// many nodes (Locator) instead of by a scan per look.
	here *[]ateapi.Worker
}

func (f nodeFacts) flipped() bool { return f.node.Labels[VersionLabel] == f.cfg.To }

// verifyPending: flipped, and not yet shown to serve the target version.
func (f nodeFacts) verifyPending() bool { return f.node.Annotations[AnnVerifyPending] == f.cfg.To }

// markedTo: the move to cfg.To is recorded on the node (the mark step).
func (f nodeFacts) markedTo() bool { return f.node.Annotations[AnnMovingTo] == f.cfg.To }

// marked: the node carries this move's mark — AnnMovingTo naming cfg.To,
// or the residents record alone. A mark naming the other version is the
// other way's move (a node half-way there), not this one's to lift.
func (f nodeFacts) marked() bool {
	to, moving := f.node.Annotations[AnnMovingTo]
	_, seen := f.node.Annotations[AnnResidents]
	return moving && to == f.cfg.To || !moving && seen
}

// markedFrom: the node carries the other way's mark (AnnMovingTo naming
// cfg.From), the record of a move toward the version this move leaves.
// On a node still at cfg.To that move never flipped it: this move takes
// the node back, and its own mark replaces that one.
func (f nodeFacts) markedFrom() bool {
	to, ok := f.node.Annotations[AnnMovingTo]
	return ok && to == f.cfg.From
}

// takingBack: the node never left cfg.To, and a move the other way is
// recorded on it (the other way's mark, or this one's written over it,
// which leaves AnnVerifyPending naming cfg.To without a flip).
func (f nodeFacts) takingBack() bool {
	return f.flipped() && (f.markedFrom() || f.markedTo() && f.verifyPending())
}

// stale are the node's DRAINING workers of the pools its version pins
// whose pod still runs there: a move the other way drained them and there
// is no undrain, so the node serves again only once their pods are
// replaced. After an ordinary flip there are none: the node's workers of
// the target pools are new.
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
	return nodeFacts{cfg: &NodeConfig{}, node: f.node, inv: narrowTo(f.inv, f.node.Name, f.stale())}
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
	return len(f.undrained()) == 0 && (len(f.workers()) > 0 || len(f.podsOf(f.cfg.FromPools)) == 0)
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
		if _, wrongPlatform := pullFailure(&p); wrongPlatform {
			continue // its image has no build for this node: it never runs, so it never registers or takes an actor
		}
		if !known[string(p.UID)] && p.DeletionTimestamp == nil {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

// capacity weighs the node's live actors against free workers elsewhere.
// Taking a node back suspends only the actors on its drained workers, and
// the node keeps serving: they may resume on any free slot, its own too.
func (f nodeFacts) capacity() ([]Need, bool) {
	if f.takingBack() {
		live, _ := f.staleView().residents()
		return Capacity(f.inv, f.cfg.Lineage, "", live)
	}
	live, _ := f.residents()
	return Capacity(f.inv, f.cfg.Lineage, f.node.Name, live)
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
	d := AnnMovingTo + "=" + f.cfg.To + ", " + AnnResidents + "=" + v
	if f.flipped() {
		d += ", " + AnnVerifyPending + "=" + f.cfg.To + " (taking back a node the move to " + f.cfg.From + " left half-way)"
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
		if ok && v != "" && v != f.node.Labels[VersionLabel] && !f.ateletReadyOf(v) {
			return v
		}
	}
	return ""
}

func (f nodeFacts) hasAteletPods() bool {
	for _, p := range f.pods {
		if p.Labels[AppLabel] == AteletApp {
			return true
		}
	}
	return false
}

// ateletReadyOf: a Ready atelet of version runs on the node (a Terminating
// one serves nothing).
func (f nodeFacts) ateletReadyOf(version string) bool {
	for _, p := range f.pods {
		if p.Labels[AppLabel] == AteletApp && p.Labels[VersionLabel] == version && p.DeletionTimestamp == nil && kube.PodReady(&p) {
			return true
		}
	}
	return false
}

// ateletReady says whether the target version's atelet on the node is
// Ready, and else what it waits on: the new pod stays Pending (unscheduled,
// so not on the node yet) while another atelet pod there still holds the
// node's host ports.
func (f nodeFacts) ateletReady() (bool, string) {
	var mine *corev1.Pod
	var holders []string
	for i, p := range f.pods {
		if p.Labels[AppLabel] != AteletApp {
			continue
		}
		if p.Labels[VersionLabel] == f.cfg.To && p.DeletionTimestamp == nil {
			if kube.PodReady(&p) {
				return true, "atelet " + p.Name + " Ready"
			}
			mine = &f.pods[i]
			continue
		}
		h := p.Name + " (" + p.Labels[VersionLabel]
		if p.DeletionTimestamp != nil {
			h += ", Terminating, deleted at " + p.DeletionTimestamp.Add(-gracePeriod(p)).UTC().Format(time.RFC3339)
		}
		holders = append(holders, h+")")
	}
	why := "no atelet for " + f.cfg.To + " on the node yet"
	if mine != nil {
		why = "atelet " + mine.Name + " is " + string(mine.Status.Phase)
	}
	if len(holders) > 0 {
		why += "; atelet pod " + strings.Join(holders, ", ") + " still holds the node's host ports (8085, 9090): the " +
			f.cfg.To + " atelet stays Pending until it has exited"
	}
	return false, why
}

// gracePeriod is the grace the pod's deletion was given: its
// deletionTimestamp minus this is when the deletion was asked for.
func gracePeriod(p corev1.Pod) time.Duration {
	if g := p.DeletionGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 0
}

// toPodsReady counts the target pools' pods on the node and the Ready ones.
func (f nodeFacts) toPodsReady() (ready, total int) {
	for _, p := range f.podsOf(f.cfg.ToPools) {
		if p.DeletionTimestamp != nil {
			continue // being deleted: not a worker the node will serve with (its Deployment replaces it)
		}
		total++
		if kube.PodReady(&p) {
			ready++
		}
	}
	return ready, total
}

// toPodsNotReady names the target pools' pods on the node that are not
// Ready, with what their status says, so a wait that runs out of budget
// says which pod to look at.
func (f nodeFacts) toPodsNotReady() []string {
	var out []string
	for _, p := range f.podsOf(f.cfg.ToPools) {
		if p.DeletionTimestamp != nil || kube.PodReady(&p) {
			continue
		}
		why := string(p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady || (c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue) {
				why += fmt.Sprintf(", %s=%s", c.Type, c.Status)
				if c.Reason != "" {
					why += " " + c.Reason
				}
			}
		}
		if pull, _ := pullFailure(&p); pull != "" {
			why += ", " + pull
		}
		out = append(out, p.Namespace+"/"+p.Name+" ("+why+")")
	}
	return out
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
		if to[w.PoolKey()] && w.Serving() && w.Node != f.node.Name {
			return false
		}
	}
	return true
}

// unservedLineages are the pool lineages (a serving pool and its clone)
// that want workers but have none serving anywhere once this node has
// moved (its workers of the pools it left do not count): their actors
// would have nowhere to resume, whatever this node shows. A clone whose
// pods a ResourceQuota, a taint or an image of another architecture keeps
// from running leaves its lineage so after the last node.
func (f nodeFacts) unservedLineages() []string {
	want := map[string]bool{}
	for _, p := range append(append([]Pool(nil), f.cfg.FromPools...), f.cfg.ToPools...) {
		if l, ok := f.cfg.Lineage[p.Key()]; ok && p.Desired > 0 {
			want[l] = true
		}
	}
	from := poolSet(f.cfg.FromPools)
	for _, w := range f.inv.Workers {
		if from[w.PoolKey()] && w.Node == f.node.Name {
			continue
		}
		if l, ok := f.cfg.Lineage[w.PoolKey()]; ok && w.Serving() {
			delete(want, l)
		}
	}
	out := make([]string, 0, len(want))
	for l := range want {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// toVerified is the verify step's verdict on pods and workers as shown.
func (f nodeFacts) toVerified() (bool, string) {
	ready, total := f.toPodsReady()
	active := f.toWorkersActive()
	if u := f.unservedLineages(); len(u) > 0 {
		return false, fmt.Sprintf("no worker of pool %s or its clone serves anywhere (registered, ACTIVE, capacity reported): "+
			"its actors would have nowhere to resume. Are the clone's pods Pending (kubectl get pods -n NS -l %s; a "+
			"ResourceQuota, a taint, an image of another architecture)?", short(u), PoolLabel)
	}
	why := fmt.Sprintf("%d of %d %s worker pod(s) on the node Ready, %d registered ACTIVE and serving (era D: capacity "+
		"reported)", ready, total, f.cfg.To, active)
	if ready == total && active == 0 && f.toMustServeHere() {
		return false, why + "; no " + f.cfg.To + " worker serves on any other node, so one must come up here " +
			"(the target pools' pods are Pending until the scheduler places them)"
	}
	return ready == total && active >= ready, why
}

// toWorkersActive counts the node's target-pool workers that serve:
// ACTIVE, and in era D with their capacity reported.
func (f nodeFacts) toWorkersActive() int {
	to := poolSet(f.cfg.ToPools)
	n := 0
	for _, w := range f.workers() {
		if to[w.PoolKey()] && w.Serving() {
			n++
		}
	}
	return n
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
