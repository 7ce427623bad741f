package node

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/modelcheck"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The ate node roll, model-checked. The model is a tiny cluster: nodes
// labelled v1 or v2, each with one atelet; an old pool pinned to v1 and its
// clone pinned to v2 (Deployments that replace a deleted pod at once);
// worker pods that schedule, register and drain; actors that wake on free
// workers, idle into PAUSED with their snapshot on the node, and suspend.
//
// The CLI is `kubectl ate roll next-node --all` (or naming a node): in each
// observation it builds the facts the way observeNode does, picks the node
// with the real NextNode/HalfMoved, finds the first step whose real Done is
// false, checks the step's real Guards, and turns the step's effect into
// API calls (the model's reading of Act, cross-checked with Plan). The calls
// run one at a time, interleaved with the environment, and a kill drops the
// ones not made yet. The environment: traffic, the scheduler and the
// syncer, atelets replacing each other after a flip, suspends finishing,
// and a list (workers or actors) that misses one item in one observation.
//
// The rules checked in every state are the sim's (sim/monitor), decided
// from the model's own state, never from the runbook's predicates.

const (
	mSuspended uint8 = iota
	mRunning
	mPaused
	mSuspending
	mCrashed
)

var actorStateName = [...]ateapi.ActorState{ateapi.ActorSuspended, ateapi.ActorRunning, ateapi.ActorPaused, ateapi.ActorSuspending,
	ateapi.ActorCrashed}

// A worker pod slot: a Deployment keeps its replicas, so a deleted pod is
// replaced at once by a Pending one with a new UID (gen flips).
type mPod struct {
	Gen   uint8
	Node  int8 // -1: Pending
	Reg   bool // registered as a worker
	Drain bool // the worker is DRAINING
}

type mActor struct {
	St     uint8
	Worker int8 // pod slot it is bound to, -1 for none
	Pin    int8 // node holding its local snapshot (PAUSED, or SUSPENDING from PAUSED), -1
}

type mNode struct {
	Label  uint8 // 0: v1, 1: v2
	Atelet uint8 // version of the atelet pod running on the node
	Ready  bool  // that atelet is Ready
	Cordon bool  // cordoned by rollbook: no pod schedules there
	Moving bool  // marked AnnMovingTo=v2
	Verify bool  // marked AnnVerifyPending=v2: flipped, not yet seen to serve
	Seen   uint8 // AnnResidents: a bit per actor
}

const (
	opDrain uint8 = iota
	opSuspend
	opConfirm // emptyNode's GetActor confirmation: waits until the actor is SUSPENDED or off the node
	opFlip
	opDelete
	opMark     // annotate the node AnnMovingTo=v2
	opCordon   // the flip's cordon
	opRecheck  // the flip's second look: drops the patch if the node is not empty
	opUncordon // lift rollbook's cordon
	opUnmark   // remove AnnMovingTo
	opVerified // remove AnnVerifyPending
)

type mOp struct {
	Kind uint8
	Arg  int8 // pod slot, actor or node
	Gen  uint8
	Node int8 // the node the step acts on
}

const (
	cliIdle uint8 = iota
	cliActing
	cliFinished
)

type aState struct {
	Nodes  [3]mNode
	Pods   [4]mPod // 0,1: old pool (w, pinned to v1); 2,3: its clone (w-v2, pinned to v2)
	Actors [3]mActor
	CLI    uint8
	Ops    []mOp
	// Budgets bound the environment so the search is finite.
	Wakes, Misses, Kills int8
	// One observation misses this worker (pod slot) or actor; -1 none.
	MissPod, MissActor int8
	// Bad is the first rule an action broke (deleting an old pod before the
	// flip, a plan that edits a pool, an act the plan does not list).
	Bad string
}

func (s aState) clone() aState {
	s.Ops = append([]mOp(nil), s.Ops...)
	return s
}

type aModel struct {
	nodes  int
	rb     *runbook.Runbook[nodeFacts]
	byNode bool // also try `roll next-node NODE` for each node
	// atomic steps make their calls in the same move as the observation
	// that decided them.
	atomic map[string]bool
	// Which lists may miss an item.
	missWorkers, missActors bool
	// person may suspend any awake actor by hand between runs, as a
	// blocked run asks.
	person bool
}

const (
	mNS    = "ns"
	oldPin = "v1"
	newPin = "v2"
)

var versions = [2]string{oldPin, newPin}

func slotPool(slot int) string {
	if slot < 2 {
		return "w"
	}
	return "w-v2"
}

func slotPin(slot int) uint8 { return uint8(slot / 2) }

func nodeName(i int) string { return "n" + strconv.Itoa(i+1) }

func podName(slot int, gen uint8) string {
	return fmt.Sprintf("%s-%d%c", slotPool(slot), slot, 'a'+gen)
}

func actorName(i int) string { return "a" + strconv.Itoa(i+1) }

func (m *aModel) cluster(s *aState) *fleet.Cluster {
	c := &fleet.Cluster{Old: oldPin, New: newPin,
		Atelets: []fleet.Atelet{{Name: "atelet-v1", Version: oldPin}, {Name: "atelet-v2", Version: newPin}},
		Pools: []fleet.Pool{{Namespace: mNS, Name: "w", Pin: oldPin, CloneName: "w-v2"},
			{Namespace: mNS, Name: "w-v2", Pin: newPin, ClonedFrom: "w"}}}
	var objects []corev1.Node
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		ni := fleet.NodeInfo{Name: nodeName(i), Version: versions[nd.Label], Cordoned: nd.Cordon}
		if nd.Moving {
			ni.MovingTo = newPin
		}
		if nd.Verify {
			ni.VerifyPending = newPin
		}
		c.Nodes = append(c.Nodes, ni)
		objects = append(objects, *m.node(s, i))
	}
	c.SetNodeObjects(objects, true)
	return c
}

// node is node i as the API shows it.
func (m *aModel) node(s *aState, i int) *corev1.Node {
	n := s.Nodes[i]
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i),
		Labels: map[string]string{fleet.VersionLabel: versions[n.Label]}, Annotations: map[string]string{}}}
	if n.Moving {
		node.Annotations[fleet.AnnMovingTo] = newPin
	}
	if n.Verify {
		node.Annotations[fleet.AnnVerifyPending] = newPin
	}
	if n.Seen != 0 {
		var seen []string
		for a := range s.Actors {
			if n.Seen&(1<<a) != 0 {
				seen = append(seen, "a/"+actorName(a))
			}
		}
		node.Annotations[AnnResidents] = strings.Join(seen, ",")
	}
	if n.Cordon {
		node.Spec.Unschedulable = true
		node.Annotations[kube.AnnCordonedBy] = CordonOwner
	}
	return node
}

// workerPods are every worker pod, as a list of the pools' pods shows them.
func (m *aModel) workerPods(s *aState) []corev1.Pod {
	var out []corev1.Pod
	for slot := range s.Pods {
		out = append(out, m.pod(s, slot))
	}
	return out
}

func (m *aModel) pod(s *aState, slot int) corev1.Pod {
	p := s.Pods[slot]
	name := podName(slot, p.Gen)
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: mNS, Name: name, UID: types.UID(name),
		Labels: map[string]string{fleet.PoolLabel: slotPool(slot)}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if p.Node >= 0 {
		pod.Spec.NodeName = nodeName(int(p.Node))
		pod.Status.Phase = corev1.PodRunning
		if p.Reg {
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
	}
	return pod
}

// inventory is what ListWorkers and ListActors return, linked by the real
// Resolve; miss leaves out the item the environment chose.
func (m *aModel) inventory(s *aState, miss bool) *ateapi.Inventory {
	var ws []ateapi.Worker
	for slot, p := range s.Pods {
		if !p.Reg || (miss && int(s.MissPod) == slot) {
			continue
		}
		w := ateapi.Worker{Name: podName(slot, p.Gen), Namespace: mNS, Pool: slotPool(slot), Pod: podName(slot, p.Gen),
			Node: nodeName(int(p.Node)), State: ateapi.WorkerActive}
		if p.Drain {
			w.State = ateapi.WorkerDraining
		}
		// The worker's own assignment names its actor (the cross-check
		// of an actor list that missed it).
		for i, a := range s.Actors {
			if int(a.Worker) == slot && a.St != mSuspended {
				w.Actors = append(w.Actors, ateapi.ActorRef{Atespace: "a", Name: actorName(i)})
			}
		}
		ws = append(ws, w)
	}
	var as []ateapi.Actor
	for i, a := range s.Actors {
		if miss && int(s.MissActor) == i {
			continue
		}
		x := ateapi.Actor{Atespace: "a", Name: actorName(i), State: actorStateName[a.St]}
		if a.Worker >= 0 {
			x.Worker = podName(int(a.Worker), s.Pods[a.Worker].Gen)
		}
		if a.Pin >= 0 {
			x.AssignedNode = nodeName(int(a.Pin))
			x.SnapshotNodes = []string{nodeName(int(a.Pin))}
		}
		as = append(as, x)
	}
	ateapi.Resolve(ws, as)
	return &ateapi.Inventory{Workers: ws, Actors: as}
}

// facts is what observeNode reads for node i: the Node, the pods on it
// (worker pods and the atelet) and the inventory.
func (m *aModel) facts(s *aState, cfg *Config, i int, inv *ateapi.Inventory) nodeFacts {
	n := s.Nodes[i]
	f := nodeFacts{cfg: cfg, inv: inv, node: m.node(s, i)}
	for slot, p := range s.Pods {
		if int(p.Node) == i {
			f.pods = append(f.pods, m.pod(s, slot))
		}
	}
	at := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: "atelet-" + versions[n.Atelet] + "-" + nodeName(i),
		Labels: map[string]string{fleet.AppLabel: fleet.AteletApp, fleet.VersionLabel: versions[n.Atelet]}},
		Spec: corev1.PodSpec{NodeName: nodeName(i)}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if n.Ready {
		at.Status.Phase = corev1.PodRunning
		at.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	f.pods = append(f.pods, at)
	return f
}

func nodeIndex(name string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "n"))
	return i - 1
}

func slotOf(s *aState, uid string) (int, bool) {
	for slot, p := range s.Pods {
		if podName(slot, p.Gen) == uid {
			return slot, true
		}
	}
	return 0, false
}

func actorIndex(name string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "a"))
	return i - 1
}

// cliMove is one observation of the CLI in state s: `roll next-node`
// (node "") or `roll next-node NODE`.
func (m *aModel) cliMove(s aState, node string) (modelcheck.Move[aState], bool) {
	cmd := "roll next-node"
	if node != "" {
		cmd += " " + node
	}
	n := s.clone()
	n.MissPod, n.MissActor = -1, -1 // the miss is used up by this observation
	c := m.cluster(&s)
	sd, err := RollSides(c)
	if err != nil {
		panic(err)
	}
	inv := m.inventory(&s, true)
	loc := NewLocator(c, m.workerPods(&s), inv)
	target := node
	if target == "" {
		var err error
		if target, err = loc.Next(sd); err != nil {
			return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: blocked: %v", cmd, err), Next: n}, true
		}
		if target == "" {
			n.CLI = cliFinished
			return modelcheck.Move[aState]{Name: "cli: " + cmd + ": every node is at v2", Next: n}, true
		}
	} else if moves := loc.HalfMoved(); len(moves) > 0 && moves[0].Node != target {
		return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: blocked, %s is half-moved", cmd, moves[0].Node), Next: n}, true
	}
	cfg := &Config{Sides: sd}
	ni := nodeIndex(target)
	f := m.facts(&s, cfg, ni, inv)
	if pos := runbook.Locate(m.rb, f); pos.Stage != runbook.StageDone {
		st := m.rb.Steps[pos.Step]
		if pos.Guard != "" {
			return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: %s %s blocked: %s", cmd, target, st.ID, pos.Guard), Next: n}, true
		}
		ops, bad := m.effect(&s, st, f, ni)
		if len(ops) == 0 && bad == "" {
			if s.MissPod < 0 && s.MissActor < 0 {
				return modelcheck.Move[aState]{}, false // waiting for the environment (atelet, pods)
			}
			return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: %s %s waits", cmd, target, st.ID), Next: n}, true
		}
		if n.Bad == "" {
			n.Bad = bad
		}
		n.CLI, n.Ops = cliActing, ops
		name := fmt.Sprintf("cli: %s: %s %s (%d call(s))", cmd, target, st.ID, len(ops))
		if m.atomic[st.ID] {
			// The window between this observation and the calls is closed.
			for n.CLI == cliActing {
				mv, ok := m.call(n)
				if !ok {
					break
				}
				n, name = mv.Next, name+"; "+strings.TrimPrefix(mv.Name, "cli: ")
			}
		}
		return modelcheck.Move[aState]{Name: name, Next: n}, true
	}
	return modelcheck.Move[aState]{}, false
}

// effect is the model's reading of a step's Act on facts f, as the API
// calls it makes in order; bad names an action the plan does not justify.
func (m *aModel) effect(s *aState, st runbook.Step[nodeFacts], f nodeFacts, ni int) (ops []mOp, bad string) {
	var plan []runbook.Change
	if st.Plan != nil {
		plan = st.Plan(f)
	}
	planned := map[string]bool{}
	for _, c := range plan {
		planned[c.Object+" "+c.Action] = true
		if strings.HasPrefix(c.Object, "workerpool/") {
			bad = "plan of " + st.ID + " changes " + c.Object
		}
	}
	drain := func(w ateapi.Worker) {
		if slot, ok := slotOf(s, w.Name); ok {
			ops = append(ops, mOp{Kind: opDrain, Arg: int8(slot), Gen: s.Pods[slot].Gen, Node: int8(ni)})
		}
	}
	switch st.ID {
	case "ate.node.mark":
		// The move is recorded before anything on the node changes: a kill
		// after it leaves a node known to be in progress.
		ops, bad = m.record(f, ni, planned, ops, bad)
	case "ate.node.drain":
		// record again: the residents the drain's facts show are added.
		ops, bad = m.record(f, ni, planned, ops, bad)
		for _, w := range f.undrained() {
			if !planned["worker/"+w.Name+" DrainWorker"] {
				bad = "drain of worker " + w.Name + " is not in the plan"
			}
			drain(w)
		}
	case "ate.node.suspend":
		// emptyNode: record the residents, drain what registered since,
		// stop at a crashed actor, suspend the live ones that are not
		// mid-transition, confirm each.
		ops, bad = m.record(f, ni, planned, ops, bad)
		for _, w := range f.undrained() {
			drain(w)
		}
		live, crashed := f.residents()
		if len(crashed) > 0 {
			return ops, bad // blocked after the drains (no --revert-crashed)
		}
		for _, a := range live {
			if !planned["actor/"+a.Atespace+"/"+a.Name+" SuspendActor"] {
				bad = "suspend of " + a.Name + " is not in the plan"
			}
			if !a.State.Transient() || a.State == ateapi.ActorUnspecified {
				ops = append(ops, mOp{Kind: opSuspend, Arg: int8(actorIndex(a.Name)), Node: int8(ni)})
			}
		}
		for _, a := range live {
			ops = append(ops, mOp{Kind: opConfirm, Arg: int8(actorIndex(a.Name)), Node: int8(ni)})
		}
	case "ate.node.flip":
		// flipNode: cordon, a second look, the patch if the look agrees,
		// the cordon lifted whatever happened.
		for _, a := range []string{"cordon", "label", "uncordon", "annotate"} {
			if !planned["node/"+f.node.Name+" "+a] {
				bad = a + " of the flip is not in the plan"
			}
		}
		ops = append(ops, mOp{Kind: opCordon, Arg: int8(ni), Node: int8(ni)}, mOp{Kind: opRecheck, Arg: int8(ni), Node: int8(ni)},
			mOp{Kind: opFlip, Arg: int8(ni), Node: int8(ni)}, mOp{Kind: opUncordon, Arg: int8(ni), Node: int8(ni)})
	case "ate.node.release":
		if f.ourCordon() {
			if !planned["node/"+f.node.Name+" uncordon"] {
				bad = "uncordon is not in the plan"
			}
			ops = append(ops, mOp{Kind: opUncordon, Arg: int8(ni), Node: int8(ni)})
		}
		if f.marked() {
			if !planned["node/"+f.node.Name+" annotate"] {
				bad = "unmark is not in the plan"
			}
			ops = append(ops, mOp{Kind: opUnmark, Arg: int8(ni), Node: int8(ni)})
		}
	case "ate.node.verify":
		// Wait until the node serves, then remove the mark.
		if ok, _ := f.toVerified(); ok && f.verifyPending() {
			if !planned["node/"+f.node.Name+" annotate"] {
				bad = "the verify's unmark is not in the plan"
			}
			ops = append(ops, mOp{Kind: opVerified, Arg: int8(ni), Node: int8(ni)})
		}
	case "ate.node.delete-old-pods":
		// Act reads the inventory again and keeps any pod whose worker
		// hosts an actor.
		hosts := hostsByWorker(m.inventory(s, false))
		for _, p := range f.podsOf(f.cfg.FromPools) {
			if !planned["pod/"+p.Namespace+"/"+p.Name+" delete"] {
				bad = "delete of " + p.Name + " is not in the plan"
			}
			if hosts[string(p.UID)] != "" {
				continue
			}
			if slot, ok := slotOf(s, string(p.UID)); ok {
				ops = append(ops, mOp{Kind: opDelete, Arg: int8(slot), Gen: s.Pods[slot].Gen, Node: int8(ni)})
			}
		}
	}
	return ops, bad
}

// record is the model's reading of nodeBuilder.record: one node patch that marks the
// node and adds the residents f shows to AnnResidents.
func (m *aModel) record(f nodeFacts, ni int, planned map[string]bool, ops []mOp, bad string) ([]mOp, string) {
	v, grow := f.toRecord()
	if !grow {
		return ops, bad
	}
	if !planned["node/"+f.node.Name+" annotate"] {
		bad = "record on " + f.node.Name + " is not in the plan"
	}
	var mask uint8
	for _, r := range strings.Split(v, ",") {
		if _, name, ok := strings.Cut(r, "/"); ok {
			mask |= 1 << actorIndex(name)
		}
	}
	return append(ops, mOp{Kind: opMark, Arg: int8(ni), Gen: mask, Node: int8(ni)}), bad
}

func onNode(s *aState, a mActor, node int) bool {
	return (a.Worker >= 0 && int(s.Pods[a.Worker].Node) == node) || int(a.Pin) == node
}

// call makes the first pending API call; ok is false when it cannot run
// yet (a confirmation waiting for a suspend to finish).
func (m *aModel) call(s aState) (modelcheck.Move[aState], bool) {
	n := s.clone()
	op := n.Ops[0]
	n.Ops = n.Ops[1:]
	var name string
	switch op.Kind {
	case opDrain:
		name = "DrainWorker " + podName(int(op.Arg), op.Gen)
		if p := &n.Pods[op.Arg]; p.Gen == op.Gen && p.Reg {
			p.Drain = true
		}
	case opSuspend:
		name = "SuspendActor " + actorName(int(op.Arg))
		if a := &n.Actors[op.Arg]; a.St == mRunning || a.St == mPaused {
			a.St = mSuspending
		}
	case opConfirm:
		a := n.Actors[op.Arg]
		switch {
		case a.St == mCrashed:
			n.Ops = nil // the next round finds it crashed: blocked
			name = "GetActor " + actorName(int(op.Arg)) + ": CRASHED, blocked"
		case a.St == mSuspended || !onNode(&n, a, int(op.Node)):
			name = "GetActor " + actorName(int(op.Arg)) + ": confirmed off the node"
		case a.St == mSuspending:
			return modelcheck.Move[aState]{}, false
		default:
			// Awake again on the node: emptyNode goes round once more,
			// which is the next observation.
			n.Ops = nil
			name = "GetActor " + actorName(int(op.Arg)) + ": " + string(actorStateName[a.St]) + " again, next round"
		}
	case opFlip:
		// One patch at the version of the second look: the label, our
		// cordon lifted, the moving mark removed; no flip without the cordon.
		nd := &n.Nodes[op.Arg]
		if !nd.Cordon {
			name = "label " + nodeName(int(op.Arg)) + ": refused, the cordon was lifted"
			break
		}
		name = "label " + nodeName(int(op.Arg)) + " " + fleet.VersionLabel + "=v2, uncordon, unmark, mark unverified"
		nd.Label, nd.Cordon, nd.Moving, nd.Seen, nd.Verify = 1, false, false, 0, true
	case opMark:
		name = fmt.Sprintf("annotate %s %s=v2, residents %03b", nodeName(int(op.Arg)), fleet.AnnMovingTo, op.Gen)
		n.Nodes[op.Arg].Moving = true
		n.Nodes[op.Arg].Seen |= op.Gen
	case opCordon:
		name = "cordon " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Cordon = true
	case opUncordon:
		name = "uncordon " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Cordon = false
	case opUnmark:
		name = "remove " + fleet.AnnMovingTo + " from " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Moving, n.Nodes[op.Arg].Seen = false, 0
	case opVerified:
		name = "remove " + fleet.AnnVerifyPending + " from " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Verify = false
	case opRecheck:
		// flipNode's refresh: a fresh observation (its lists may miss an
		// item too), the flip's guards on it.
		sd, err := RollSides(m.cluster(&n))
		if err != nil {
			panic(err)
		}
		f := m.facts(&n, &Config{Sides: sd}, int(op.Arg), m.inventory(&n, true))
		n.MissPod, n.MissActor = -1, -1
		name = "second look at " + nodeName(int(op.Arg))
		// The step's own guards (a seeded bug drops one from both looks).
		var b []string
		for _, st := range m.rb.Steps {
			if st.ID != "ate.node.flip" {
				continue
			}
			for _, g := range st.Guards {
				if ok, why := g.Check(f); !ok {
					b = append(b, why)
				}
			}
		}
		// confirmGone: GetActor for each recorded resident.
		for i, a := range n.Actors {
			if n.Nodes[op.Arg].Seen&(1<<i) != 0 && a.St != mSuspended && onNode(&n, a, int(op.Arg)) {
				b = append(b, actorName(i)+" read directly on the node")
			}
		}
		if len(b) > 0 || f.flipped() {
			name += ": not flipped (" + strings.Join(b, "; ") + ")"
			n.Ops = n.Ops[1:] // the patch; the uncordon stays
		}
	case opDelete:
		name = "delete pod " + podName(int(op.Arg), op.Gen)
		p := &n.Pods[op.Arg]
		if p.Gen != op.Gen {
			name += " (gone already)"
			break
		}
		if p.Node >= 0 && n.Nodes[p.Node].Label == slotPin(int(op.Arg)) && n.Bad == "" {
			n.Bad = fmt.Sprintf("old-pool pod %s deleted while %s still carries %s", podName(int(op.Arg), op.Gen),
				nodeName(int(p.Node)), versions[n.Nodes[p.Node].Label])
		}
		for i := range n.Actors {
			if a := &n.Actors[i]; int(a.Worker) == int(op.Arg) && a.St != mSuspended {
				a.St = mCrashed // its pod is gone with it
			}
		}
		*p = mPod{Gen: p.Gen ^ 1, Node: -1}
	}
	if len(n.Ops) == 0 {
		n.CLI, n.Ops = cliIdle, nil
	}
	return modelcheck.Move[aState]{Name: "cli: " + name, Next: n}, true
}

func (m *aModel) moves(s aState) []modelcheck.Move[aState] {
	var out []modelcheck.Move[aState]
	add := func(name string, n aState) { out = append(out, modelcheck.Move[aState]{Name: name, Next: n}) }
	switch s.CLI {
	case cliIdle:
		if mv, ok := m.cliMove(s, ""); ok {
			out = append(out, mv)
		}
		if m.byNode {
			for i := 0; i < m.nodes; i++ {
				if mv, ok := m.cliMove(s, nodeName(i)); ok {
					out = append(out, mv)
				}
			}
		}
	case cliActing:
		if mv, ok := m.call(s); ok {
			out = append(out, mv)
		}
		if s.Kills > 0 {
			n := s.clone()
			n.Kills--
			n.CLI, n.Ops = cliIdle, nil
			add(fmt.Sprintf("cli: killed (%d call(s) not made); re-run", len(s.Ops)), n)
		}
	}
	// The scheduler, the syncer and the atelets.
	perNode := make([]int, m.nodes)
	for _, p := range s.Pods {
		if p.Node >= 0 {
			perNode[p.Node]++
		}
	}
	for slot, p := range s.Pods {
		if p.Node < 0 {
			for i := 0; i < m.nodes; i++ {
				if s.Nodes[i].Label == slotPin(slot) && !s.Nodes[i].Cordon && perNode[i] < 2 {
					n := s.clone()
					n.Pods[slot].Node = int8(i)
					add(fmt.Sprintf("env: pod %s scheduled on %s", podName(slot, p.Gen), nodeName(i)), n)
				}
			}
		} else if nd := s.Nodes[p.Node]; !p.Reg && nd.Atelet == slotPin(slot) && nd.Ready {
			n := s.clone()
			n.Pods[slot].Reg = true
			add(fmt.Sprintf("env: pod %s registers as an ACTIVE worker", podName(slot, p.Gen)), n)
		}
	}
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		switch {
		case nd.Label != nd.Atelet:
			// The old atelet exits; whatever still lives on it is lost.
			n := s.clone()
			n.Nodes[i] = mNode{Label: nd.Label, Atelet: nd.Label}
			for j := range n.Actors {
				if a := &n.Actors[j]; a.St != mSuspended && a.St != mCrashed && onNode(&s, *a, i) {
					a.St = mCrashed
				}
			}
			add(fmt.Sprintf("env: the %s atelet on %s exits, the %s one starts", versions[nd.Atelet], nodeName(i), versions[nd.Label]), n)
		case !nd.Ready:
			n := s.clone()
			n.Nodes[i].Ready = true
			add(fmt.Sprintf("env: the %s atelet on %s is Ready", versions[nd.Atelet], nodeName(i)), n)
		}
	}
	// Actors: suspends finish, traffic wakes, idle actors pause.
	bound := map[int8]bool{}
	for _, a := range s.Actors {
		if a.Worker >= 0 {
			bound[a.Worker] = true
		}
	}
	free := func(slot int, node int) bool {
		p := s.Pods[slot]
		return p.Reg && !p.Drain && !bound[int8(slot)] && (node < 0 || int(p.Node) == node)
	}
	for i, a := range s.Actors {
		switch a.St {
		case mSuspending:
			n := s.clone()
			n.Actors[i] = mActor{St: mSuspended, Worker: -1, Pin: -1}
			add(fmt.Sprintf("env: %s finishes suspending", actorName(i)), n)
		case mRunning:
			n := s.clone()
			n.Actors[i] = mActor{St: mPaused, Worker: -1, Pin: s.Pods[a.Worker].Node}
			add(fmt.Sprintf("env: %s idles: PAUSED, snapshot on %s", actorName(i), nodeName(int(s.Pods[a.Worker].Node))), n)
		}
		if m.person && s.CLI == cliIdle && (a.St == mRunning || a.St == mPaused) {
			n := s.clone()
			n.Actors[i].St = mSuspending
			add(fmt.Sprintf("person: kubectl ate suspend actor %s", actorName(i)), n)
		}
		switch a.St {
		case mSuspended, mPaused:
			if s.Wakes == 0 {
				continue
			}
			for slot := range s.Pods {
				if free(slot, int(a.Pin)) {
					n := s.clone()
					n.Wakes--
					n.Actors[i] = mActor{St: mRunning, Worker: int8(slot), Pin: -1}
					add(fmt.Sprintf("env: traffic wakes %s on worker %s (%s)", actorName(i), podName(slot, s.Pods[slot].Gen),
						nodeName(int(s.Pods[slot].Node))), n)
				}
			}
		}
	}
	// A list misses one item in the CLI's next observation.
	observes := s.CLI == cliIdle || (s.CLI == cliActing && s.Ops[0].Kind == opRecheck)
	if observes && s.Misses > 0 && s.MissPod < 0 && s.MissActor < 0 {
		for slot, p := range s.Pods {
			if p.Reg && m.missWorkers {
				n := s.clone()
				n.Misses--
				n.MissPod = int8(slot)
				add(fmt.Sprintf("env: the next ListWorkers misses %s", podName(slot, p.Gen)), n)
			}
		}
		for i := range s.Actors {
			if !m.missActors {
				break
			}
			n := s.clone()
			n.Misses--
			n.MissActor = int8(i)
			add(fmt.Sprintf("env: the next ListActors misses %s", actorName(i)), n)
		}
	}
	return out
}

func (m *aModel) invariants() []modelcheck.Invariant[aState] {
	return []modelcheck.Invariant[aState]{
		{Name: "no worker serving next to an atelet of another version", Check: func(s aState) string {
			for slot, p := range s.Pods {
				if !p.Reg {
					continue
				}
				hosts := false
				for _, a := range s.Actors {
					hosts = hosts || (int(a.Worker) == slot && a.St != mSuspended)
				}
				// Between the flip and the delete, old workers wait next to
				// the new atelet: only DRAINING and empty is safe there.
				if at := s.Nodes[p.Node].Atelet; at != slotPin(slot) && (!p.Drain || hosts) {
					return fmt.Sprintf("worker %s (pinned to %s, draining %v, hosts an actor %v) next to the %s atelet on %s",
						podName(slot, p.Gen), versions[slotPin(slot)], p.Drain, hosts, versions[at], nodeName(int(p.Node)))
				}
			}
			return ""
		}},
		{Name: "no actor CRASHED or lost", Check: func(s aState) string {
			for i, a := range s.Actors {
				if a.St == mCrashed {
					return actorName(i) + " is CRASHED"
				}
			}
			return ""
		}},
		{Name: "a finished roll leaves no node cordoned or marked", Check: func(s aState) string {
			for i := 0; i < m.nodes && s.CLI == cliFinished; i++ {
				if nd := s.Nodes[i]; nd.Cordon || nd.Moving || nd.Verify || nd.Seen != 0 {
					return fmt.Sprintf("%s: cordoned %v, marked %v, unverified %v", nodeName(i), nd.Cordon, nd.Moving, nd.Verify)
				}
			}
			return ""
		}},
		{Name: "the node status shows in progress is the node next-node takes first, both ways", Check: func(s aState) string {
			return m.statusAgrees(&s)
		}},
		{Name: "no old-pool pod deleted before its node's flip, no serving pool edited, every call planned",
			Check: func(s aState) string { return s.Bad }},
		{Name: "at most one node out of service", Check: func(s aState) string {
			var out []string
			for i := 0; i < m.nodes; i++ {
				nd := s.Nodes[i]
				draining := false
				for _, p := range s.Pods {
					draining = draining || (p.Reg && p.Drain && int(p.Node) == i)
				}
				if draining || nd.Cordon || nd.Label != nd.Atelet || !nd.Ready {
					out = append(out, nodeName(i))
				}
			}
			if len(out) > 1 {
				return "out of service: " + strings.Join(out, ", ")
			}
			return ""
		}},
	}
}

// statusAgrees compares what `kubectl ate status` says is in progress, from
// what it reads (the nodes, the pools' pods, the inventory), with the node
// `roll next-node` and `rollback next-node` would take first from what they
// read (the nodes in full, the pools' pods and the atelets, the inventory).
func (m *aModel) statusAgrees(s *aState) string {
	c := m.cluster(s)
	inv := m.inventory(s, false)
	var pods []corev1.Pod
	for i := 0; i < m.nodes; i++ {
		f := m.facts(s, &Config{}, i, inv)
		pods = append(pods, f.pods...)
	}
	// What status reads: the pools' pods, and every pod of the nodes that
	// stand half-way on those.
	shown, err := WithPodsOfMovingNodes(c, m.workerPods(s), inv, func(node string) ([]corev1.Pod, error) {
		return m.facts(s, &Config{}, nodeIndex(node), inv).pods, nil
	})
	if err != nil {
		return err.Error()
	}
	// Status lists what this Locator finds half-moved (campaign.InferStatus).
	inProgress := NewLocator(c, shown, inv).HalfMoved()
	loc := NewLocator(c, pods, inv)
	for _, way := range []struct {
		dir   Direction
		sides Sides
	}{{Roll, sides(c, oldPin, newPin)}, {Rollback, sides(c, newPin, oldPin)}} {
		shown, shownStep := "", ""
		for _, n := range inProgress {
			if n.Direction == way.dir {
				shown, shownStep = n.Node, n.Step()
				break
			}
		}
		next, err := loc.Next(way.sides)
		taken, takenStep := "", ""
		if half := loc.HalfMovedTo(way.sides); err == nil && len(half) > 0 {
			taken, takenStep = next, half[0].Step()
		}
		if shown != taken || shownStep != takenStep {
			return fmt.Sprintf("%s: status shows %q in progress at %q, %s next-node would first take %q at %q (err %v)", way.dir,
				shown, shownStep, way.dir, taken, takenStep, err)
		}
	}
	return ""
}

// key packs a state into a few bytes.
func key(s aState) string {
	b := make([]byte, 0, 48)
	for _, n := range s.Nodes {
		b = append(b, n.Label|n.Atelet<<1|boolBit(n.Ready)<<2|boolBit(n.Cordon)<<3|boolBit(n.Moving)<<4|n.Seen<<5)
	}
	var unverified byte
	for i, n := range s.Nodes {
		unverified |= boolBit(n.Verify) << i
	}
	b = append(b, unverified)
	for _, p := range s.Pods {
		b = append(b, byte(p.Node+1)|p.Gen<<2|boolBit(p.Reg)<<3|boolBit(p.Drain)<<4)
	}
	for _, a := range s.Actors {
		b = append(b, a.St, byte(a.Worker+1)|byte(a.Pin+1)<<4)
	}
	b = append(b, s.CLI, byte(s.Wakes), byte(s.Misses), byte(s.Kills), byte(s.MissPod+1), byte(s.MissActor+1))
	for _, o := range s.Ops {
		b = append(b, o.Kind, byte(o.Arg), o.Gen, byte(o.Node))
	}
	return string(b) + "|" + s.Bad
}

func boolBit(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

func describe(s aState) string {
	var b strings.Builder
	for i, nd := range s.Nodes {
		if nd == (mNode{}) && i > 1 {
			continue
		}
		fmt.Fprintf(&b, "  node %s: label %s, atelet %s ready=%v cordoned=%v marked=%v unverified=%v residents=%03b\n", nodeName(i),
			versions[nd.Label], versions[nd.Atelet], nd.Ready, nd.Cordon, nd.Moving, nd.Verify, nd.Seen)
	}
	for slot, p := range s.Pods {
		where := "Pending"
		if p.Node >= 0 {
			where = "on " + nodeName(int(p.Node))
		}
		fmt.Fprintf(&b, "  pod %s %s registered=%v draining=%v\n", podName(slot, p.Gen), where, p.Reg, p.Drain)
	}
	for i, a := range s.Actors {
		fmt.Fprintf(&b, "  actor %s %s", actorName(i), actorStateName[a.St])
		if a.Worker >= 0 {
			fmt.Fprintf(&b, " on %s", podName(int(a.Worker), s.Pods[a.Worker].Gen))
		}
		if a.Pin >= 0 {
			fmt.Fprintf(&b, " snapshot on %s", nodeName(int(a.Pin)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

type aConfig struct {
	nodes                   int
	wakes, misses, kills    int8
	missWorkers, missActors bool
	person                  bool
	byNode                  bool
	atomic                  []string // step IDs whose calls follow their observation at once
	drop                    string   // "step-id/guard name prefix" removed from the runbook
	skip                    string   // a step whose Done always says done (a broken step)
	blindPlan               string   // a step whose Plan lists nothing (a dry run that hides its calls)
}

func newATEModel(t *testing.T, c aConfig) modelcheck.Model[aState] {
	rb := Runbook(nil, nil, nil, &Config{})
	if c.drop != "" {
		id, guard, _ := strings.Cut(c.drop, "/")
		found := false
		for i := range rb.Steps {
			if rb.Steps[i].ID != id {
				continue
			}
			var kept []runbook.Guard[nodeFacts]
			for _, g := range rb.Steps[i].Guards {
				if strings.HasPrefix(g.Name, guard) {
					found = true
					continue
				}
				kept = append(kept, g)
			}
			rb.Steps[i].Guards = kept
		}
		if !found {
			t.Fatalf("no guard %q on step %s", guard, id)
		}
	}
	for i := range rb.Steps {
		if rb.Steps[i].ID == c.skip {
			rb.Steps[i].Done = func(nodeFacts) (bool, string) { return true, "skipped (seeded bug)" }
		}
		if rb.Steps[i].ID == c.blindPlan {
			rb.Steps[i].Plan = func(nodeFacts) []runbook.Change { return nil }
		}
	}
	m := &aModel{nodes: c.nodes, rb: rb, byNode: c.byNode, atomic: map[string]bool{}, missWorkers: c.missWorkers,
		missActors: c.missActors, person: c.person}
	for _, id := range c.atomic {
		m.atomic[id] = true
	}
	init := aState{Wakes: c.wakes, Misses: c.misses, Kills: c.kills, MissPod: -1, MissActor: -1}
	for i := 0; i < c.nodes; i++ {
		init.Nodes[i] = mNode{Label: 0, Atelet: 0, Ready: true}
	}
	// The old pool serves from n1 and n2; its clone waits for a v2 node.
	init.Pods = [4]mPod{{Node: 0, Reg: true}, {Node: 1, Reg: true}, {Node: -1}, {Node: -1}}
	// a1 runs on n1, a2 idled on n1 (snapshot there), a3 is suspended.
	init.Actors = [3]mActor{{St: mRunning, Worker: 0, Pin: -1}, {St: mPaused, Worker: -1, Pin: 0}, {St: mSuspended, Worker: -1,
		Pin: -1}}
	return modelcheck.Model[aState]{
		Init:       []aState{init},
		Key:        key,
		Moves:      m.moves,
		Invariants: m.invariants(),
		Done:       func(s aState) bool { return s.CLI == cliFinished },
		Describe:   describe,
		MaxStates:  3_000_000,
	}
}

func exploreATE(t *testing.T, c aConfig) modelcheck.Result {
	t.Helper()
	res, err := modelcheck.Explore(newATEModel(t, c))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ate node roll, %d nodes, %d wake(s), %d list miss(es) (workers %v, actors %v), %d kill(s), by node %v, atomic %v, "+
		"person %v, dropped guard %q, skipped step %q: %s", c.nodes, c.wakes, c.misses, c.missWorkers, c.missActors, c.kills, c.byNode,
		c.atomic, c.person, c.drop, c.skip, res)
	if os.Getenv("ROLLBOOK_MODEL_VERBOSE") != "" && res.Violation != nil {
		t.Log(res.Violation)
	}
	return res
}

// TestModelATENodeRoll explores the roll with kills, traffic, missed items
// in the worker and actor lists (in the observation or in the flip's second
// look, the same actor in both) and a person who suspends actors by hand when a run asks, and finds
// no broken rule. The quick configurations (-short too) are small; the
// full ones take each disturbance, and each pair of them, on their own;
// the long ones (ROLLBOOK_MODEL_LONG=1) combine them. The four "was:" rows are the configurations in which the
// explorer found the runbook's earlier faults (docs/modelcheck.md).
func TestModelATENodeRoll(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    aConfig
		tier modelcheck.Tier
	}{
		{"kill, traffic", aConfig{nodes: 2, wakes: 1, kills: 1, person: true}, modelcheck.Full},
		{"three nodes: kill", aConfig{nodes: 3, kills: 1, person: true}, modelcheck.Full},
		{"traffic, a missed worker or actor", aConfig{nodes: 2, wakes: 1, misses: 1, missWorkers: true, missActors: true,
			person: true}, modelcheck.Full},
		{"kill, a missed worker or actor", aConfig{nodes: 2, misses: 1, kills: 1, missWorkers: true, missActors: true,
			person: true}, modelcheck.Quick},
		{"next-node --all and next-node NODE: kill, a missed worker", aConfig{nodes: 2, misses: 1, kills: 1, missWorkers: true,
			person: true, byNode: true}, modelcheck.Full},
		{"a paused actor missed by two lists in a row", aConfig{nodes: 2, misses: 2, kills: 1, missActors: true, person: true}, modelcheck.Quick},
		{"was: a missed paused actor is lost at the flip", aConfig{nodes: 2, misses: 1, kills: 1, missActors: true, person: true}, modelcheck.Quick},
		{"was: the flip races a replacement pod", aConfig{nodes: 2, person: true}, modelcheck.Quick},
		{"was: a missed draining worker lets a second node start", aConfig{nodes: 2, misses: 1, missWorkers: true, byNode: true}, modelcheck.Quick},
		{"was: delete-old-pods waits on actors of the new pool", aConfig{nodes: 2, wakes: 1}, modelcheck.Quick},
		// Longer runs (ROLLBOOK_MODEL_LONG=1): every disturbance at once.
		{"next-node --all: kill, traffic, a missed worker or actor", aConfig{nodes: 2, wakes: 1, misses: 1, kills: 1,
			missWorkers: true, missActors: true, person: true}, modelcheck.Long},
		{"next-node --all and next-node NODE: kill, traffic, a missed worker", aConfig{nodes: 2, wakes: 1, misses: 1, kills: 1,
			missWorkers: true, person: true, byNode: true}, modelcheck.Long},
		{"three nodes: kill, traffic", aConfig{nodes: 3, wakes: 1, kills: 1, person: true}, modelcheck.Long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tier.Skip(t)
			if res := exploreATE(t, tc.c); res.Violation != nil {
				t.Fatalf("%s", res.Violation)
			}
		})
	}
}

// TestModelATESeededBug breaks the suspend step (its Done always true): the
// flip's guards still stop the roll, so nothing is lost. With one of those
// guards dropped as well, the explorer must find an actor lost and print
// how.
func TestModelATESeededBug(t *testing.T) {
	c := aConfig{nodes: 2, wakes: 1, kills: 1, person: true, skip: "ate.node.suspend"}
	if res := exploreATE(t, c); res.Violation != nil {
		t.Fatalf("with the suspend step broken the flip's guards must still hold:\n%s", res.Violation)
	}
	c.drop = "ate.node.flip/no actor lives on the node"
	res := exploreATE(t, c)
	if res.Violation == nil {
		t.Fatal("the explorer did not notice the dropped guard")
	}
	if res.Violation.Invariant != "no actor CRASHED or lost" {
		t.Fatalf("want an actor lost, got:\n%s", res.Violation)
	}
	t.Logf("seeded bug caught:\n%s", res.Violation)

	// --dry-run must show what the run would do: a plan that hides the
	// drain's calls is caught by the cross-check of calls and plan.
	res = exploreATE(t, aConfig{nodes: 2, person: true, blindPlan: "ate.node.drain"})
	if res.Violation == nil || !strings.Contains(res.Violation.Detail, "not in the plan") {
		t.Fatalf("a blind plan went unnoticed: %v", res.Violation)
	}
}
