package roll

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RelabelledAtOnce stops a roll that finds two or more nodes flipped to
// NEW that no move flipped (half-way, with no move's mark): their old
// workers run next to the new atelet, and moving them one by one leaves the
// rest in that skew meanwhile. Nodes of one GKE node pool are that pool's
// label, updated before every node was rolled (the runbook's third warning:
// GKE writes a pool's label on every node in it at once, with no drain);
// the fix is the pool's label back to OLD. A single node flipped by hand is
// the node runbook's to finish (or to send back first, when actors there
// cannot be suspended). nil when there are none.
func RelabelledAtOnce(c *fleet.Cluster, moves []node.HalfMoved) error {
	if c.New == "" {
		return nil
	}
	pools := map[string][]string{}
	for _, m := range moves {
		if m.Unmarked && m.Direction == node.Roll && m.To == c.New {
			pool := ""
			if n := c.ListedNodeMeta(m.Node); n != nil {
				pool = n.Labels[fleet.GKENodePoolLabel]
			}
			pools[pool] = append(pools[pool], m.Node)
		}
	}
	var names []string
	for p, nodes := range pools {
		if len(nodes) >= 2 {
			names = append(names, p)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	var b strings.Builder
	for _, p := range names {
		nodes := pools[p]
		sort.Strings(nodes)
		if p == "" {
			fmt.Fprintf(&b, "%d nodes were relabelled to %s=%s at once, not moved by the roll: %s; their %s workers run next to "+
				"the %s atelet. Nothing was changed. Put each back:\n", len(nodes), fleet.VersionLabel, c.New,
				strings.Join(nodes, ", "), c.Old, c.New)
			for _, n := range nodes {
				fmt.Fprintf(&b, "    kubectl label node %s %s=%s --overwrite\n", n, fleet.VersionLabel, c.Old)
			}
			continue
		}
		fmt.Fprintf(&b, "node pool %s was relabelled to %s=%s before the roll moved its nodes: %s are at %s with no move "+
			"recorded, their %s workers next to the %s atelet (a pool's label applies to every node in it at once, with no "+
			"drain: the runbook's third warning). Nothing was changed. Put the pool back to %s, carrying every existing user "+
			"label (and park its autoscaler again if it was restored):\n"+
			"    gcloud container node-pools describe %s %s --format='get(config.labels)'\n"+
			"    gcloud container node-pools update %s %s "+
			"--node-labels=<every existing user label>,%s=%s\n", p, fleet.VersionLabel, c.New, strings.Join(nodes, ", "), c.New,
			c.Old, c.New, c.Old, p, c.GKE.Where(), p, c.GKE.Where(), fleet.VersionLabel, c.Old)
	}
	fmt.Fprintf(&b, "Once the nodes show %s (kubectl get nodes -L %s), re-run: the roll moves them one at a time, each with "+
		"its drain. Relabel a node pool with %s only after every node shows it (kubectl ate status prints the commands then).",
		c.Old, fleet.VersionLabel, c.New)
	what, fix, _ := strings.Cut(b.String(), "\n")
	return runbook.Blocked(&RelabelError{What: what, Fix: fix})
}

// RelabelError is RelabelledAtOnce's stop: what happened (its first line)
// and what puts it right, apart so status can show each where it belongs.
type RelabelError struct{ What, Fix string }

func (e *RelabelError) Error() string { return e.What + "\n" + e.Fix }
