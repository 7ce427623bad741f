package node

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The ate node roll and its way back, model-checked. The model is a tiny
// cluster: nodes labelled v1 or v2, each with one atelet; an old pool
// pinned to v1 and its clone pinned to v2 (Deployments that replace a
// deleted pod at once); worker pods that schedule, register (once their
// pod has an IP: upstream's syncer, reference §5.3) and drain; actors that
// wake on free workers whose node runs their version's Ready atelet (a
// resume restores through it), idle into PAUSED with their snapshot on
// the node, and suspend.
//
// The CLI is what status names: `kubectl ate roll next-node` (or naming a
// node), `kubectl ate rollback next-node`, and `kubectl ate recover-node
// NODE` for a node the Locator finds drained with no move recorded. In
// each observation it builds the facts the way the observers do, picks the
// node with the real Locator, finds the first step whose real Done is
// false, checks the step's real Guards, and turns the step's effect into
// API calls (the model's reading of Act, cross-checked with Plan). The
// calls run one at a time, interleaved with the environment, and a kill
// drops the ones not made yet. The environment: traffic, the scheduler and
// the syncer, atelets replacing each other after a flip, a v2 atelet that
// never becomes Ready (its image cache; a person may clear it), a person
// who drains a worker by hand, suspends finishing, and a list (workers or
// actors) that misses one item in one observation.
//
// The rules checked in every state are the sim's (sim/monitor), decided
// from the model's own state, never from the runbook's predicates; the
// goals (model_goals_test.go) are that from every reachable state both
// the roll and the rollback can still finish.

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
	Hand  bool // drained by a person, not by a run
	// Stuck: the slot's pods never register (their ateom cannot reach the
	// control plane) until a person fixes the cause; a replacement is
	// stuck too (the cause is in the pool's template).
	Stuck bool
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
	Broken bool  // the v2 atelet cannot become Ready here until a person clears its image cache
	Cordon bool  // cordoned by rollbook: no pod schedules there
	Moving uint8 // AnnMovingTo: 0 none, else the version index + 1
	Verify uint8 // AnnVerifyPending: 0 none, else the version index + 1
	Seen   uint8 // AnnResidents: a bit per actor
}

const (
	opDrain uint8 = iota
	opSuspend
	opConfirm // emptyNode's GetActor confirmation: waits until the actor is SUSPENDED or off the node
	opFlip
	opDelete
	opMark     // annotate the node AnnMovingTo (and AnnVerifyPending when taking a node back)
	opCordon   // the flip's cordon
	opRecheck  // the flip's second look: drops the patch if the node is not empty
	opUncordon // lift rollbook's cordon
	opUnmark   // remove AnnMovingTo and AnnResidents
	opVerified // remove AnnVerifyPending
	// clearUnregistered's delete: GetWorker (draining it if it registered
	// meanwhile), then the delete unless it hosts an actor. One move: the
	// window between the read and the delete is the product's residual
	// risk, documented in docs/ate.md.
	opDeleteUnregistered
)

type mOp struct {
	Kind uint8
	Arg  int8 // pod slot, actor or node
	Gen  uint8
	Node int8 // the node the step acts on
	V    uint8
	// Flag: a mark that also sets AnnVerifyPending (a take-back); a delete
	// declared on the Lease (rollbook.dev/recovering-node: replaced in place).
	Flag bool
}

const (
	cliIdle uint8 = iota
	cliActing
)

type aState struct {
	Nodes  [3]mNode
	Pods   [4]mPod // 0,1: old pool (w, pinned to v1); 2,3: its clone (w-v2, pinned to v2)
	Actors [3]mActor
	CLI    uint8
	Ops    []mOp
	// Budgets bound the environment so the search is finite.
	Wakes, Misses, Kills, Fails, Drains int8
	// One observation misses this worker (pod slot) or actor; -1 none.
	MissPod, MissActor int8
	// Bad is the first rule an action broke (deleting an old pod before the
	// flip, a plan that edits a pool, an act the plan does not list, a
	// command claiming done on a cluster that is not).
	Bad string
}

func (s aState) clone() aState {
	s.Ops = append([]mOp(nil), s.Ops...)
	return s
}

type aModel struct {
	nodes  int
	rb     *runbook.Runbook[nodeFacts]
	rec    *runbook.Runbook[recoverFacts]
	byNode bool // also try `roll next-node NODE` for each node
	// back: the rollback's next-node is a command too.
	back bool
	// quiet registers a pod as it is scheduled and readies an atelet as
	// it starts (unless it fails): a smaller model for the long ways.
	quiet bool
	// fix: a person may clear a broken atelet's image cache, and fix what
	// keeps stuck pods from registering.
	fix bool
	// clearing: a run that waited --register-timeout for a pod to register
	// takes it off the node (clearUnregistered); false is the seeded bug,
	// the run that waits for it on every re-run.
	clearing bool
	// atomic steps make their calls in the same move as the observation
	// that decided them.
	atomic map[string]bool
	// Which lists may miss an item.
	missWorkers, missActors bool
	// person may suspend any awake actor by hand between runs, as a
	// blocked run asks.
	person bool
	// memo holds what depends on the cluster's picture alone (picture):
	// status's agreement, the goals, the nodes to recover.
	memo map[string]string
}

// picture packs what status and the Locator read — nodes, pods (their
// generations aside: they only name them), actors — into a key.
func picture(s *aState) string {
	b := make([]byte, 0, 24)
	for _, n := range s.Nodes {
		b = append(b, n.Label|n.Atelet<<1|boolBit(n.Ready)<<2|boolBit(n.Cordon)<<3|boolBit(n.Broken)<<4|n.Moving<<5,
			n.Verify|n.Seen<<2)
	}
	for _, p := range s.Pods {
		b = append(b, byte(p.Node+1)|boolBit(p.Reg)<<3|boolBit(p.Drain)<<4|boolBit(p.Hand)<<5)
	}
	for _, a := range s.Actors {
		b = append(b, a.St, byte(a.Worker+1)|byte(a.Pin+1)<<4)
	}
	return string(b)
}

// memoized returns what f computes for s's picture under name, computed once.
func (m *aModel) memoized(name string, s *aState, f func() string) string {
	k := name + "|" + picture(s)
	if v, ok := m.memo[k]; ok {
		return v
	}
	v := f()
	m.memo[k] = v
	return v
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

// mark is a node's AnnMovingTo or AnnVerifyPending value.
func mark(v uint8) string {
	if v == 0 {
		return ""
	}
	return versions[v-1]
}

func (m *aModel) cluster(s *aState) *fleet.Cluster {
	c := &fleet.Cluster{Old: oldPin, New: newPin,
		Atelets: []fleet.Atelet{{Name: "atelet-v1", Version: oldPin}, {Name: "atelet-v2", Version: newPin}},
		Pools: []fleet.Pool{{Namespace: mNS, Name: "w", Pin: oldPin, CloneName: "w-v2", Desired: 2},
			{Namespace: mNS, Name: "w-v2", Pin: newPin, ClonedFrom: "w", Desired: 2}}}
	var objects []corev1.Node
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		c.Nodes = append(c.Nodes, fleet.NodeInfo{Name: nodeName(i), Version: versions[nd.Label], Cordoned: nd.Cordon,
			MovingTo: mark(nd.Moving), VerifyPending: mark(nd.Verify)})
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
	if n.Moving != 0 {
		node.Annotations[fleet.AnnMovingTo] = mark(n.Moving)
	}
	if n.Verify != 0 {
		node.Annotations[fleet.AnnVerifyPending] = mark(n.Verify)
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

// schedulable: a node the pod in slot could be placed on now.
func (m *aModel) schedulable(s *aState, slot int) []int {
	perNode := make([]int, m.nodes)
	for _, p := range s.Pods {
		if p.Node >= 0 {
			perNode[p.Node]++
		}
	}
	var out []int
	for i := 0; i < m.nodes; i++ {
		if s.Nodes[i].Label == slotPin(slot) && !s.Nodes[i].Cordon && perNode[i] < 2 {
			out = append(out, i)
		}
	}
	return out
}

func (m *aModel) pod(s *aState, slot int) corev1.Pod {
	p := s.Pods[slot]
	name := podName(slot, p.Gen)
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: mNS, Name: name, UID: types.UID(name),
		Labels: map[string]string{fleet.PoolLabel: slotPool(slot)}},
		Spec:   corev1.PodSpec{NodeSelector: map[string]string{fleet.VersionLabel: versions[slotPin(slot)]}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	switch {
	case p.Node >= 0:
		pod.Spec.NodeName = nodeName(int(p.Node))
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	case len(m.schedulable(s, slot)) == 0:
		// The scheduler looked and found no node: the roll's reserve.
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable}}
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

// facts is what the node observer reads for node i: the Node, the pods on
// it (worker pods and the atelet) and the inventory.
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

// recoverFacts is what recover-node reads for node i: the node, the worker
// pods its version could host (any node), their Deployments, the inventory.
func (m *aModel) recoverFacts(s *aState, i int, inv *ateapi.Inventory) recoverFacts {
	f := recoverFacts{cfg: &RecoverConfig{}, node: m.node(s, i), inv: inv, deps: map[string]*appsv1.Deployment{}}
	for _, p := range m.workerPods(s) {
		if f.relevant(&p) {
			f.pods = append(f.pods, p)
			f.deps[p.Namespace+"/"+p.Labels[fleet.PoolLabel]] = &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
		}
	}
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

func onNode(s *aState, a mActor, node int) bool {
	return (a.Worker >= 0 && int(s.Pods[a.Worker].Node) == node) || int(a.Pin) == node
}

// key packs a state into a few bytes.
func key(s aState) string {
	b := make([]byte, 0, 64)
	for _, n := range s.Nodes {
		b = append(b, n.Label|n.Atelet<<1|boolBit(n.Ready)<<2|boolBit(n.Cordon)<<3|boolBit(n.Broken)<<4|n.Moving<<5,
			n.Verify|n.Seen<<2)
	}
	for _, p := range s.Pods {
		// A pod's generation only names it: with no call pending that
		// names one, states that differ in it alone behave alike.
		gen := p.Gen
		if len(s.Ops) == 0 {
			gen = 0
		}
		b = append(b, byte(p.Node+1)|gen<<2|boolBit(p.Reg)<<3|boolBit(p.Drain)<<4|boolBit(p.Hand)<<5|boolBit(p.Stuck)<<6)
	}
	for _, a := range s.Actors {
		b = append(b, a.St, byte(a.Worker+1)|byte(a.Pin+1)<<4)
	}
	b = append(b, s.CLI, byte(s.Wakes), byte(s.Misses), byte(s.Kills), byte(s.Fails), byte(s.Drains), byte(s.MissPod+1),
		byte(s.MissActor+1))
	for _, o := range s.Ops {
		b = append(b, o.Kind, byte(o.Arg), o.Gen, byte(o.Node), o.V|boolBit(o.Flag)<<2)
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
		fmt.Fprintf(&b, "  node %s: label %s, atelet %s ready=%v broken=%v cordoned=%v moving-to=%q verify-pending=%q residents=%03b\n",
			nodeName(i), versions[nd.Label], versions[nd.Atelet], nd.Ready, nd.Broken, nd.Cordon, mark(nd.Moving), mark(nd.Verify), nd.Seen)
	}
	for slot, p := range s.Pods {
		where := "Pending"
		if p.Node >= 0 {
			where = "on " + nodeName(int(p.Node))
		}
		fmt.Fprintf(&b, "  pod %s %s registered=%v draining=%v by hand=%v stuck=%v\n", podName(slot, p.Gen), where, p.Reg, p.Drain,
			p.Hand, p.Stuck)
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
