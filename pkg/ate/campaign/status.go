package campaign

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
)

// Phase names where the roll stands.
type Phase string

// The phases, in the order a roll goes through them.
const (
	PhaseBlocked     Phase = "blocked"            // the cluster is in a shape the roll must not touch
	PhaseNotStarted  Phase = "not started"        // one atelet DaemonSet
	PhasePrepared    Phase = "dataplane prepared" // a NEW atelet DaemonSet; pools not all cloned
	PhaseCloned      Phase = "pools cloned"
	PhaseRolling     Phase = "rolling"
	PhaseRollingBack Phase = "rolling back" // a node is half-way back to OLD
	PhaseRolled      Phase = "rolled"       // every node NEW; actors may still sit on old workers
	PhaseRetireable  Phase = "ready to retire"
	PhaseComplete    Phase = "complete" // the old pools and atelet were retired; the clones serve
)

// NodeProgress is a node half-way in a move, either way.
type NodeProgress struct {
	Node    string `json:"node"`
	Version string `json:"version"`
	// Direction is "roll" (OLD → NEW) or "rollback" (NEW → OLD).
	Direction string `json:"direction"`
	// Step is the node runbook's first step not done, and what it saw.
	Step string `json:"step"`
	// Next is the command that finishes the node; Back the one that takes
	// it back the other way (a move that cannot finish still has a way out).
	Next string `json:"next"`
	Back string `json:"back"`
}

// Status is the whole picture `kubectl ate status` shows.
type Status struct {
	Phase   Phase          `json:"phase"`
	Summary string         `json:"summary"`
	Cluster *fleet.Cluster `json:"cluster"`
	Nodes   []NodeProgress `json:"inProgress,omitempty"`
	// Drained are nodes no move stands on whose workers are DRAINING with
	// their pods still there: they serve nothing new until recover-node.
	Drained []node.Drained `json:"drained,omitempty"`
	// Counts of nodes per version label value ("" = unlabelled).
	Counts map[string]int `json:"nodesPerVersion"`
	// API facts; APIError says why they are missing. The two counts are
	// facts only when ActorsRead (workers and actors were listed); the JSON
	// shows them as null otherwise.
	Capabilities       *ateapi.Capabilities `json:"capabilities,omitempty"`
	ActorsRead         bool                 `json:"actorsRead"`
	ActorsOnOldPools   int                  `json:"actorsOnOldPoolWorkers"`
	FreeNewWorkers     int                  `json:"freeNewWorkers"`
	APIError           string               `json:"apiError,omitempty"`
	OldPoolPodsRunning int                  `json:"oldPoolPodsRunning"`
	Unobservable       []string             `json:"unobservable"`
	// ControlPlane says, once every node reached NEW (as recorded then),
	// that step 6 may have upgraded the control plane.
	ControlPlane string `json:"controlPlane,omitempty"`
	Next         string `json:"next"`
}

// MarshalJSON writes the actor counts as null when they were not read: a 0
// there would claim what no one observed.
func (s Status) MarshalJSON() ([]byte, error) {
	type plain Status
	out := struct {
		plain
		ActorsOnOldPools *int `json:"actorsOnOldPoolWorkers"`
		FreeNewWorkers   *int `json:"freeNewWorkers"`
	}{plain: plain(s)}
	if s.ActorsRead {
		out.ActorsOnOldPools, out.FreeNewWorkers = &s.ActorsOnOldPools, &s.FreeNewWorkers
	}
	return json.Marshal(out)
}

// Unobservable are the runbook steps no probe can see.
var Unobservable = []string{
	"1: new CRDs applied (kubectl apply -f manifests/ate-install/generated): clone-pools checks the schema it needs",
	"2: ate-controller upgraded (ate-setup deploy ate-controller): seen only where its images are tagged with the version",
	"6: control plane upgraded (ate-setup deploy apiserver; deploy ate-system): seen once every node reached NEW, " +
		"by the API server's images",
}

// ObserveStatus builds the status from the cluster and, when inv is not
// nil, the substrate's workers and actors; notReady names the nodes whose
// Ready condition is not True (kube.NodesNotReady).
func ObserveStatus(ctx context.Context, cs kubernetes.Interface, c *fleet.Cluster, inv *ateapi.Inventory,
	notReady map[string]string) (*Status, error) {
	var pods []corev1.Pod
	if len(c.Problems) == 0 {
		var err error
		if pods, err = fleet.PoolPods(ctx, cs, c.Pools); err != nil {
			return nil, err
		}
		if pods, err = node.WithPodsOfMovingNodes(c, pods, inv, func(node string) ([]corev1.Pod, error) {
			return kube.PodsOnNode(ctx, cs, node)
		}); err != nil {
			return nil, err
		}
	}
	// What cannot serve is not counted as serving or free: a worker on a
	// NotReady node, or whose pod is not Running and Ready.
	fleet.MarkDown(inv, pods, notReady)
	return InferStatus(c, pods, inv).withNodesDown(c, notReady), nil
}

// withNodesDown says, while the next command would start a node, that a
// NotReady node no person cordoned holds the roll: it is out of service
// already, and `roll next-node` and `rollback` take one node out at a time.
func (s *Status) withNodesDown(c *fleet.Cluster, notReady map[string]string) *Status {
	starts := s.Phase == PhaseCloned || s.Phase == PhaseRolling && len(s.Nodes) == 0 && len(s.Drained) == 0
	if !starts {
		return s
	}
	if err := roll.OthersDown(c.NodeObjects(), notReady, ""); err != nil {
		s.Summary += "; " + err.Error()
		s.Next = "bring the NotReady node back, or cordon it for its repair (kubectl cordon NODE), then: " + s.Next
	}
	return s
}

// InferStatus says where the roll stands from the cluster, the pools' pods
// and (when not nil) the substrate's workers and actors. Which node is
// half-way, and at which step, is the node runbook's own verdict
// (Locator), the one `roll next-node` and `rollback` act on.
func InferStatus(c *fleet.Cluster, pods []corev1.Pod, inv *ateapi.Inventory) *Status {
	s := &Status{Cluster: c, Counts: map[string]int{}, Unobservable: Unobservable}
	for _, n := range c.Nodes {
		s.Counts[n.Version]++
	}
	if when, ok := c.ControlPlaneMayBeNew(); ok {
		step6 := "step 6 may have upgraded the control plane"
		if st := c.Step6(); st.Ran {
			step6 = "step 6 upgraded the control plane (" + st.String() + ")"
		}
		s.ControlPlane = fmt.Sprintf("every node reached %s at %s: %s, so a rollback first needs deploy apiserver from the "+
			"OLD checkout and --control-plane-reverted", c.New, when.UTC().Format(time.RFC3339), step6)
	}
	if len(c.Problems) > 0 {
		s.Phase, s.Summary = PhaseBlocked, strings.Join(c.Problems, "; ")
		s.Next = "fix the problems above, then: kubectl ate status"
		return s
	}
	old := fleet.PoolSet(c.OldPools())
	for _, p := range pods {
		if old[p.Namespace+"/"+p.Labels[fleet.PoolLabel]] && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			s.OldPoolPodsRunning++
		}
	}
	if inv != nil {
		s.ActorsRead = true
		s.ActorsOnOldPools = len(fleet.ActorsBoundTo(inv, c.OldPools()))
		s.FreeNewWorkers = fleet.FreeWorkers(inv, c.PoolsPinnedTo(c.New), fleet.SetOf(c.NodesAt(c.New)))
	}
	var moves, back []node.HalfMoved
	if c.New != "" {
		// With one atelet DaemonSet nothing is in progress, whatever the
		// substrate says: after a rollback the deleted clones' workers stay
		// registered as DRAINING until the eviction window ends.
		loc := node.NewLocator(c, pods, inv)
		s.Drained = loc.Drained()
		for _, m := range loc.HalfMoved() {
			if m.Direction == node.Rollback {
				back = append(back, m)
			}
			s.Nodes = append(s.Nodes, NodeProgress{Node: m.Node, Version: m.Version, Direction: m.Direction.String(),
				Step: m.Step(), Next: m.Next(), Back: m.Back()})
			moves = append(moves, m)
		}
		if re := (*roll.RelabelError)(nil); errors.As(roll.RelabelledAtOnce(c, moves), &re) {
			s.Phase, s.Summary, s.Next = PhaseBlocked, re.What, re.Fix
			return s
		}
		var unpaired []string
		for _, p := range c.OldPools() {
			if p.CloneName == "" {
				unpaired = append(unpaired, p.Key())
			}
		}
		if atNew := c.NodesAt(c.New); len(atNew) > 0 && len(unpaired) > 0 {
			s.Phase = PhaseBlocked
			s.Summary = fmt.Sprintf("%d node(s) at %s (%s) but pool(s) %s have no clone: their actors have no worker on those nodes",
				len(atNew), c.New, fleet.Brief(atNew), fleet.Brief(unpaired))
			s.Next = "kubectl ate roll clone-pools --image CLASS=REF@sha256:… (or roll the nodes back: kubectl ate rollback)"
			return s
		}
	}
	if len(back) > 0 {
		s.Phase, s.Summary = PhaseRollingBack, fmt.Sprintf("node %s is half-way back to %s; %d of %d nodes at %s", back[0].Node,
			c.Old, len(c.NodesAt(c.New)), len(c.Nodes), c.New)
		s.Next = back[0].Next() + "   (or kubectl ate rollback to roll every node back; or take the node forward again: " +
			back[0].Back() + ")"
		return s.withDrained()
	}
	// Where the roll stands is where its runbook is located (phase.go).
	s.Phase, s.Summary, s.Next = phaseOf(fleetFacts{c: c, inv: inv, moves: moves, oldPodsRunning: s.OldPoolPodsRunning,
		actorsOnOld: s.ActorsOnOldPools})
	if s.Phase == PhaseRolling && len(moves) > 0 {
		// The way on waits for what stopped the node; the way back does not.
		s.Next = moves[0].Next() + "   (or take node " + moves[0].Node + " back: " + moves[0].Back() +
			"; every node: kubectl ate rollback)"
	}
	if (s.Phase == PhaseCloned || s.Phase == PhaseRolling) && inv != nil && len(inv.Unreadable) > 0 {
		// The next command would refuse: say why, and the fix first.
		s.Summary += fmt.Sprintf("; the actors of atespace(s) %s cannot be read with this client's token, so no node may flip",
			fleet.Brief(inv.UnreadableAtespaces()))
		s.Next = "allow the client's identity to list, get and suspend actors in " + fleet.Brief(inv.UnreadableAtespaces()) +
			" (the API server's authorization policy), then: " + s.Next
	}
	return s.withDrained()
}

// withDrained puts recover-node first in the next command while a node
// serves nothing because its workers were drained with no move recorded.
func (s *Status) withDrained() *Status {
	if len(s.Drained) > 0 {
		d := s.Drained[0]
		s.Next = fmt.Sprintf("%s (its %d worker(s) are DRAINING with no move recorded: there is no undrain), then: %s",
			d.Next(), len(d.Workers), s.Next)
	}
	return s
}

func countClones(c *fleet.Cluster) int {
	n := 0
	for _, p := range c.OldPools() {
		if p.CloneName != "" {
			n++
		}
	}
	return n
}

// clonesServing: pools we cloned, pinned to the one installed version,
// whose source is gone (retired). With one atelet DaemonSet, OLD is the
// version the clones are pinned to, so OldPools lists the clones themselves.
func clonesServing(c *fleet.Cluster) bool {
	exists := map[string]bool{}
	for _, p := range c.Pools {
		exists[p.Key()] = true
	}
	for _, p := range c.Pools {
		if p.ClonedFrom != "" && p.Pin == c.Old && !exists[p.ClonedFrom] {
			return true
		}
	}
	return false
}
