package ate

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ateapi"
)

// HalfMoved are the nodes left half-way between from and to: marked
// AnnMovingTo to (durable: written before the first drain, removed after
// the flip's cordon is lifted), at to but not yet verified (AnnVerifyPending),
// at to with pods of the from pools still on it, or at from with draining workers of the from pools (there is no
// undrain, so a drained node must be finished).
func HalfMoved(c *Cluster, from, to string, fromPools []Pool, fromPods []corev1.Pod, inv *ateapi.Inventory) []string {
	at := map[string]string{}
	for _, n := range c.Nodes {
		at[n.Name] = n.Version
	}
	half := map[string]bool{}
	for _, n := range c.Nodes {
		// Marked: its move began and its release step (uncordon, unmark)
		// has not run, whichever side of the flip it is on.
		if (n.Version == from || n.Version == to) && n.MovingTo == to {
			half[n.Name] = true
		}
		// Flipped but not yet shown to serve: finished (verified) first.
		if n.Version == to && n.VerifyPending == to {
			half[n.Name] = true
		}
	}
	for _, p := range fromPods {
		if n := p.Spec.NodeName; n != "" && at[n] == to && p.DeletionTimestamp == nil {
			half[n] = true
		}
	}
	if inv != nil {
		// Only workers of the pools being moved: a worker of a deleted or
		// unrelated pool may be draining for reasons of its own.
		pools := poolSet(fromPools)
		for _, w := range inv.Workers {
			if w.State == ateapi.WorkerDraining && at[w.Node] == from && pools[w.PoolKey()] {
				half[w.Node] = true
			}
		}
	}
	out := make([]string, 0, len(half))
	for n := range half {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// NextNode picks the node to move from `from` to `to`: a half-moved node
// first, else the first node still at `from`. "" when every node is at `to`.
func NextNode(c *Cluster, from, to string, fromPools []Pool, fromPods []corev1.Pod, inv *ateapi.Inventory) string {
	if half := HalfMoved(c, from, to, fromPools, fromPods, inv); len(half) > 0 {
		return half[0]
	}
	for _, n := range c.Nodes { // sorted by name
		if n.Version == from {
			return n.Name
		}
	}
	return ""
}

// RollSides is OLD → NEW.
func RollSides(c *Cluster) (Sides, error) {
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
func RollbackSides(c *Cluster) (Sides, error) {
	if c.New == "" {
		return Sides{}, fmt.Errorf("there is nothing to roll back: only one atelet DaemonSet (%s)", c.Old)
	}
	return sides(c, c.New, c.Old), nil
}

func sides(c *Cluster, from, to string) Sides {
	s := Sides{From: from, To: to, FromPools: c.PoolsPinnedTo(from), ToPools: c.PoolsPinnedTo(to), NodesAtTo: map[string]bool{},
		Lineage: Lineages(c)}
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
