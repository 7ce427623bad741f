package node

import (
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// HalfMoved is a node that stands half-way in the node runbook moving one
// way: which way, and where.
type HalfMoved struct {
	Node      string    `json:"node"`
	Version   string    `json:"version"`
	Direction Direction `json:"direction"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	runbook.Position
	// Relabel, when set, is the version the node's label must go back to
	// first: actors there sit on workers of that version, whose atelet is
	// not on the node, so no suspend can reach them (nodeFacts.stranded).
	Relabel string `json:"relabel,omitempty"`
	// Unmarked: the node carries no move's mark, so no move flipped it:
	// its label was changed by someone else (by hand, or a node pool's).
	Unmarked bool `json:"unmarked,omitempty"`
}

// Next is the command that finishes the move, preceded by the label fix
// when the node's actors have no atelet of their workers' version.
func (m HalfMoved) Next() string { return m.command(m.Direction) }

// Back is the command that takes the move back: the other way's next-node
// takes a node half-way this way first (the node runbook, run with the
// sides swapped, undoes what the move did there), so a move that cannot
// finish — an atelet that never becomes Ready — still has a way out.
func (m HalfMoved) Back() string {
	if m.Direction == Rollback {
		return m.command(Roll)
	}
	return m.command(Rollback)
}

func (m HalfMoved) command(d Direction) string {
	cmd := "kubectl ate roll next-node"
	if d == Rollback {
		cmd = "kubectl ate rollback next-node"
	}
	if m.Relabel != "" {
		return fmt.Sprintf("kubectl label node %s %s=%s --overwrite, wait for the %s atelet to be Ready on it, then: %s %s",
			m.Node, fleet.VersionLabel, m.Relabel, m.Relabel, cmd, m.Node)
	}
	return cmd
}

// Step is the node runbook's first step not done, with what it saw.
func (m HalfMoved) Step() string { return fmt.Sprintf("%s (%s)", m.StepID, m.Evidence) }

// String says, for a person, what is half-way.
func (m HalfMoved) String() string {
	return fmt.Sprintf("node %s is half-moved (%s → %s, at step %s)", m.Node, m.From, m.To, m.Position)
}

// Locator says where each node stands in the node runbook, both ways, from
// one read of the cluster, the pools' pods and the substrate's inventory:
// the roll, the rollback, status and retire all ask it, and it asks
// runbook.Locate, so they cannot disagree.
type Locator struct {
	c     *fleet.Cluster
	pods  map[string][]corev1.Pod // by node
	inv   *ateapi.Inventory
	here  map[string][]ateapi.Worker // inv's workers by node
	nodes map[string]*corev1.Node    // as listed, or NodeInfo.stub
	steps *runbook.Runbook[nodeFacts]
	// roll and back are the two ways, when there are two versions.
	roll, back *Sides
	moves      []HalfMoved // once located
	located    bool
}

// NewLocator locates the nodes of c; pods are (at least) the pods of every
// pool pinned to either version, inv nil when the control API was not read
// (positions then rest on the cluster alone).
func NewLocator(c *fleet.Cluster, pods []corev1.Pod, inv *ateapi.Inventory) *Locator {
	l := &Locator{c: c, pods: map[string][]corev1.Pod{}, inv: inv,
		steps: locating()}
	if l.inv == nil {
		l.inv = &ateapi.Inventory{}
	}
	l.nodes = map[string]*corev1.Node{}
	objects := c.NodeObjects()
	for i := range objects {
		l.nodes[objects[i].Name] = &objects[i]
	}
	for _, n := range c.Nodes {
		if l.nodes[n.Name] == nil {
			l.nodes[n.Name] = n.Stub()
		}
	}
	l.here = map[string][]ateapi.Worker{}
	for _, w := range l.inv.Workers {
		l.here[w.Node] = append(l.here[w.Node], w)
	}
	for _, p := range pods {
		if n := p.Spec.NodeName; n != "" {
			l.pods[n] = append(l.pods[n], p)
		}
	}
	if c.New != "" && len(c.Problems) == 0 {
		roll, back := sides(c, c.Old, c.New), sides(c, c.New, c.Old)
		l.roll, l.back = &roll, &back
	}
	return l
}

// locating is the node runbook as the Locator asks it: positions read only
// the steps' Done, which decide from the facts alone, so one runbook
// without clients serves every Locator.
var locating = sync.OnceValue(func() *runbook.Runbook[nodeFacts] {
	return nodeRunbook(newNodeObserver(nil, nil, &Config{}), nil)
})

// Locate is where node stands moving s.From → s.To. Guards are not
// decided: which node is half-way, and where, never depends on them.
func (l *Locator) Locate(node string, s Sides) runbook.Position {
	return runbook.LocateOnly(l.steps, l.facts(node, s))
}

func (l *Locator) facts(node string, s Sides) nodeFacts {
	here := l.here[node]
	n := l.nodes[node]
	if n == nil {
		n = fleet.NodeInfo{Name: node}.Stub()
	}
	return nodeFacts{cfg: &Config{Sides: s}, node: n, pods: l.pods[node], inv: l.inv, here: &here}
}

// HalfMoved are the nodes half-way in a move, with the way each one goes. A
// node half-way both ways (the other way's release step sees a mark that is
// not its own) goes the way its moving mark names.
func (l *Locator) HalfMoved() []HalfMoved {
	if l.roll == nil {
		return nil // one version: nothing can be half-way between two
	}
	if l.located {
		return l.moves
	}
	var out []HalfMoved
	for _, n := range l.c.Nodes {
		var found []HalfMoved
		for _, way := range []struct {
			d Direction
			s *Sides
		}{{Roll, l.roll}, {Rollback, l.back}} {
			if p := l.Locate(n.Name, *way.s); p.Stage == runbook.StageHalfway {
				found = append(found, HalfMoved{Node: n.Name, Version: n.Version, Direction: way.d, From: way.s.From, To: way.s.To,
					Position: p, Relabel: l.facts(n.Name, *way.s).stranded(), Unmarked: n.MovingTo == "" && n.VerifyPending == ""})
			}
		}
		if len(found) == 2 && found[1].To == n.MovingTo {
			found = found[1:]
		}
		if len(found) > 0 {
			out = append(out, found[0])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	l.moves, l.located = out, true
	return out
}

// Unplaced are the nodes no position can be decided for although they
// carry a move's mark (fleet.AnnMovingTo or AnnVerifyPending): the roll's
// shape is unknown (the cluster's problems) or it has one version left.
// Whoever must not act on a half-way node must not act on these either.
func (l *Locator) Unplaced() []string {
	if l.roll != nil {
		return nil
	}
	var out []string
	for _, n := range l.c.Nodes {
		if n.MovingTo != "" || n.VerifyPending != "" {
			out = append(out, n.Name)
		}
	}
	return out
}

// HalfMovedTo are the nodes half-way moving s.From → s.To.
func (l *Locator) HalfMovedTo(s Sides) []HalfMoved {
	var out []HalfMoved
	for _, m := range l.HalfMoved() {
		if m.To == s.To {
			out = append(out, m)
		}
	}
	return out
}

// Next picks the node to move s.From → s.To: a node half-way first (there
// is no undrain, so a drained node must be finished) — one half-way this
// way, else one half-way the other way, which the node runbook run this way
// takes back (so from any stop both ways go on) — else the first node still
// at s.From; "" when every node is at s.To.
func (l *Locator) Next(s Sides) (string, error) {
	moves := l.HalfMoved()
	for _, m := range moves {
		if m.To == s.To {
			return m.Node, nil
		}
	}
	if len(moves) > 0 {
		return moves[0].Node, nil
	}
	// A node whose every worker was drained with no move recorded already
	// serves nothing new: moving it is the move; moving another would take
	// a second node out of service. (A node drained in part still serves;
	// the capacity guard weighs what it has left.)
	var out []Drained
	for _, d := range l.Drained() {
		if d.Serving == 0 {
			out = append(out, d)
		}
	}
	for _, d := range out {
		if l.version(d.Node) == s.From {
			return d.Node, nil
		}
	}
	if len(out) > 0 {
		return "", drainedElsewhere(out[0], "")
	}
	// Nodes someone else cordoned (a person's repair, another runbook's
	// upgrade) last: the roll goes as far as it can, then stops on them
	// (othersCordonGuard) saying so.
	first := ""
	for _, n := range l.c.Nodes { // sorted by name
		if n.Version != s.From {
			continue
		}
		if !n.Cordoned || n.CordonedBy == CordonOwner {
			return n.Name, nil
		}
		if first == "" {
			first = n.Name
		}
	}
	return first, nil
}

// Named says whether node may be moved by name now: not while another
// node stands half-way (one node at a time; there is no undrain) or serves
// nothing new because every worker on it was drained with no move recorded.
func (l *Locator) Named(node string) error {
	if moves := l.HalfMoved(); len(moves) > 0 && moves[0].Node != node {
		return runbook.Blocked(fmt.Errorf("%s: one node at a time, so finish it first with %s and no NODE, or name %s",
			moves[0], moves[0].Next(), moves[0].Node))
	}
	for _, d := range l.Drained() {
		if d.Node != node && d.Serving == 0 {
			return drainedElsewhere(d, node)
		}
	}
	return nil
}

func drainedElsewhere(d Drained, node string) error {
	what := "moving a node now"
	if node != "" {
		what = "moving " + node
	}
	return runbook.Blocked(fmt.Errorf("node %s serves nothing new: its worker(s) %s are DRAINING with no move recorded (there is no "+
		"undrain), and %s would take a second node out of service; nothing was changed. Recover it first: %s",
		d.Node, fleet.Brief(d.Workers), what, d.Next()))
}

func (l *Locator) version(node string) string {
	if n := l.nodes[node]; n != nil {
		return n.Labels[fleet.VersionLabel]
	}
	return ""
}

// Drained is a node that no move stands half-way on whose workers are
// DRAINING with their pods still running there: there is no undrain, so it
// serves nothing new until those pods are replaced, which is recover-node's
// job (a person drained it, or a run that recorded no move).
type Drained struct {
	Node    string   `json:"node"`
	Workers []string `json:"workers"`
	// Serving counts the node's workers that still take actors: none, and
	// the node is out of service.
	Serving int `json:"serving"`
}

// Next is the command that makes the node serve again.
func (d Drained) Next() string { return "kubectl ate recover-node " + d.Node }

// Drained are the nodes recover-node is the way out for: not half-way
// either way, with DRAINING workers whose pod (one of the pools' pods the
// Locator was given) is on the node and not being deleted.
func (l *Locator) Drained() []Drained {
	half := map[string]bool{}
	for _, m := range l.HalfMoved() {
		half[m.Node] = true
	}
	for _, n := range l.Unplaced() {
		half[n] = true
	}
	var out []Drained
	for _, n := range l.c.Nodes {
		if half[n.Name] {
			continue
		}
		live := map[string]bool{}
		for _, p := range l.pods[n.Name] {
			if _, pool := p.Labels[fleet.PoolLabel]; pool && p.DeletionTimestamp == nil && !kube.PodTerminal(&p) {
				live[string(p.UID)] = true
			}
		}
		d := Drained{Node: n.Name}
		for _, w := range l.here[n.Name] {
			switch {
			case w.State == ateapi.WorkerDraining && live[w.Name]:
				d.Workers = append(d.Workers, w.Name+" (pod "+w.Pod+")")
			case w.State == ateapi.WorkerActive:
				d.Serving++
			}
		}
		if len(d.Workers) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// RollSides is OLD → NEW.
func RollSides(c *fleet.Cluster) (Sides, error) {
	if len(c.Problems) > 0 {
		return Sides{}, fmt.Errorf("the roll cannot proceed: %v", c.Problems)
	}
	if c.New == "" {
		return Sides{}, fmt.Errorf("there is no NEW atelet DaemonSet: deploy the new atelet first (ate-setup deploy atelet), then clone " +
			"the pools")
	}
	return sides(c, c.Old, c.New), nil
}

// RollbackSides is NEW → OLD.
func RollbackSides(c *fleet.Cluster) (Sides, error) {
	if c.New == "" {
		return Sides{}, fmt.Errorf("there is nothing to roll back: only one atelet DaemonSet (%s)", c.Old)
	}
	return sides(c, c.New, c.Old), nil
}

func sides(c *fleet.Cluster, from, to string) Sides {
	s := Sides{From: from, To: to, FromPools: c.PoolsPinnedTo(from), ToPools: c.PoolsPinnedTo(to), NodesAtTo: map[string]bool{},
		Lineage: fleet.Lineages(c)}
	for _, a := range c.Atelets {
		if a.Version == to {
			s.ToAtelet = a.Name
		}
	}
	for _, n := range c.NodesAt(to) {
		s.NodesAtTo[n] = true
	}
	s.FirstNode = len(s.NodesAtTo) == 0
	return s
}

// WithPodsOfMovingNodes adds to pods (the pools' pods) every other pod of
// the nodes that stand half-way, read with podsOn. Whether a node stands
// half-way never depends on those pods (its marks, cordon, pool pods and
// workers decide it), but the step it is at may (its atelet): status reads
// them for those nodes only, so its cost grows with what is in progress,
// not with the fleet, and it names the step next-node would act on.
func WithPodsOfMovingNodes(c *fleet.Cluster, pods []corev1.Pod, inv *ateapi.Inventory,
	podsOn func(node string) ([]corev1.Pod, error)) ([]corev1.Pod, error) {
	seen := map[string]bool{}
	for _, p := range pods {
		seen[string(p.UID)] = true
	}
	for _, m := range NewLocator(c, pods, inv).HalfMoved() {
		more, err := podsOn(m.Node)
		if err != nil {
			return nil, err
		}
		for _, p := range more {
			if !seen[string(p.UID)] {
				seen[string(p.UID)] = true
				pods = append(pods, p)
			}
		}
	}
	return pods, nil
}

// Direction says which way nodes move.
type Direction int

// Roll is OLD → NEW; Rollback is NEW → OLD.
const (
	Roll Direction = iota
	Rollback
)

// String is "roll" or "rollback", as status shows the way a node goes.
func (d Direction) String() string {
	if d == Rollback {
		return "rollback"
	}
	return "roll"
}
