package ate

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ateapi"
)

// NextNode picks the node to move from `from` to `to`: a node left half-way
// first (at `to` with pods of the `from` pools still on it, or at `from`
// with draining workers), else the first node still at `from`. "" when
// every node is at `to`.
func NextNode(c *Cluster, from, to string, fromPools []Pool, fromPods []corev1.Pod, inv *ateapi.Inventory) string {
	at := map[string]string{}
	for _, n := range c.Nodes {
		at[n.Name] = n.Version
	}
	var half []string
	for _, p := range fromPods {
		if n := p.Spec.NodeName; n != "" && at[n] == to {
			half = append(half, n)
		}
	}
	if inv != nil {
		// Only workers of the pools being moved: a worker of a deleted or
		// unrelated pool may be draining for reasons of its own.
		pools := poolSet(fromPools)
		for _, w := range inv.Workers {
			if w.State == ateapi.WorkerDraining && at[w.Node] == from && (pools[w.Pool] || pools[w.Namespace+"/"+w.Pool]) {
				half = append(half, w.Node)
			}
		}
	}
	if len(half) > 0 {
		sort.Strings(half)
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
		return Sides{}, fmt.Errorf("there is no NEW atelet DaemonSet: deploy the new atelet first (ate-setup deploy atelet), then clone the pools")
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
	s := Sides{From: from, To: to, FromPools: c.PoolsPinnedTo(from), ToPools: c.PoolsPinnedTo(to), NodesAtTo: map[string]bool{}}
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
