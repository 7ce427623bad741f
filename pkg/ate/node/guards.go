package node

import (
	"fmt"
	"strings"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The guards that keep a node from being started (marked, drained or
// flipped) when its move could not finish or would take what it must not.

// paceGuard keeps a node from being started when, at the suspend pace
// measured before, its actors cannot all be suspended within
// --suspend-timeout: it would stop drained and half-emptied. With no pace
// measured nothing is projected.
func paceGuard() runbook.Guard[nodeFacts] {
	return runbook.Guard[nodeFacts]{
		Name: "the node's actors can be suspended within --suspend-timeout at the suspend pace measured before",
		Check: func(f nodeFacts) (bool, string) {
			p, ok := f.suspendProjection()
			if ok {
				return true, ""
			}
			return false, fmt.Sprintf("suspending the actors of node %s would outlast --suspend-timeout: %s. Nothing was changed "+
				"on it; %s", f.node.Name, p.Describe(), p.Fix(f.cfg.SuspendTimeout))
		},
	}
}

// paceEvidence says what the suspends are projected from: a run (or a dry
// run) shows that without a measurement nothing was checked.
func (f nodeFacts) paceEvidence() string {
	if p, _ := f.suspendProjection(); p.Pace.Known() {
		return "suspends projected " + p.Describe()
	}
	return "no suspend pace measured yet, so --suspend-timeout is not checked before the drain"
}

// knownPace is the later of the node's own recorded pace and the fleet's.
func (f nodeFacts) knownPace() Pace {
	p := f.cfg.Pace
	if q, ok := ParsePace(f.node.Annotations[AnnSuspendPace]); ok && (!p.Known() || q.At.After(p.At)) {
		p = q
	}
	return p
}

// suspendProjection projects suspending the node's live actors from the
// pace known before against the full --suspend-timeout; ok while it fits,
// or nothing can be projected (no pace, no budget).
func (f nodeFacts) suspendProjection() (Projection, bool) {
	pace := f.knownPace()
	if !pace.Known() || f.cfg.SuspendTimeout <= 0 {
		return Projection{}, true
	}
	live, _ := f.residents()
	if f.takingBack() {
		live, _ = f.staleView().residents()
	}
	p := Project(len(live), pace, f.cfg.MaxConcurrentSuspends, f.cfg.SuspendInterval, f.cfg.SuspendTimeout)
	return p, p.Fits()
}

// capacityGuard keeps a node whose actors would have nowhere to resume
// from being started (marked or drained).
func capacityGuard() runbook.Guard[nodeFacts] {
	return runbook.Guard[nodeFacts]{
		Name: "enough free workers of each pool lineage on other nodes for the node's actors",
		Check: func(f nodeFacts) (bool, string) {
			if f.cfg.FirstNode {
				return true, ""
			}
			needs, ok := f.capacity()
			why := "not enough free actor slots on ACTIVE workers for the actors this node would suspend (" +
				fleet.DescribeNeeds(needs) + "); they would have nowhere to resume"
			if down := fleet.DownWorkers(f.inv, lineagePools(f.cfg.Lineage)); len(down) > 0 {
				why += "; not counted, as they cannot serve: " + fleet.Brief(down)
			}
			return ok, why + ". Wait for workers to free up (kubectl ate status), or pass --wait"
		},
	}
}

// lineagePools is the set of pool keys the lineages cover.
func lineagePools(lineage map[string]string) map[string]bool {
	out := make(map[string]bool, len(lineage))
	for k := range lineage {
		out[k] = true
	}
	return out
}

// visibleGuard keeps a node from being started or flipped while an
// atespace the substrate names cannot be read with the client's token: its
// actors, paused ones with their local snapshot on the node included, are
// not in the actor list, and the roll does not guess where they are.
func visibleGuard() runbook.Guard[nodeFacts] {
	return runbook.Guard[nodeFacts]{
		Name: "every atespace the substrate names can be read with the client's token",
		Check: func(f nodeFacts) (bool, string) {
			if f.inv == nil || len(f.inv.Unreadable) == 0 {
				return true, ""
			}
			return false, unreadableAdvice(f.inv, f.node.Name)
		},
	}
}

// unreadableAdvice says which atespaces cannot be read and how to fix it.
func unreadableAdvice(inv *ateapi.Inventory, node string) string {
	spaces := inv.UnreadableAtespaces()
	return fmt.Sprintf("the control API refuses this client the actors of atespace(s) %s (%s), so the actors living on node %s "+
		"cannot all be seen and it must not flip. Allow the client's identity (the ate-client ServiceAccount, or the "+
		"--ate-token-file token's) to list, get and suspend actors in %s in the API server's authorization policy, "+
		"or use a token that may, then re-run", strings.Join(spaces, ", "), inv.Unreadable[spaces[0]], node,
		strings.Join(spaces, ", "))
}

// othersCordonGuard keeps a move from starting on a node someone else
// cordoned: a person (repairs, an investigation) or another runbook
// (a tt driver upgrade mid-swap). Flipping it would restart its atelet and
// move its workers under their feet; a move already begun finishes (a
// half-way node is worse), keeping that cordon.
func othersCordonGuard() runbook.Guard[nodeFacts] {
	return runbook.Guard[nodeFacts]{
		Name: "the node is not cordoned by someone else",
		Check: func(f nodeFacts) (bool, string) {
			st := kube.CordonStateOf(f.node)
			if !st.Cordoned || st.Owner == CordonOwner {
				return true, ""
			}
			who := "someone other than rollbook"
			if st.Owner != "" {
				who = "rollbook " + st.Owner
				if st.Run != "" {
					who += " (run " + st.Run + ")"
				}
			}
			return false, fmt.Sprintf("node %s is cordoned by %s: it may be under repair or in another upgrade, and "+
				"moving it would restart its atelet and move its workers; nothing was written to it. Let that work "+
				"finish and the node be uncordoned (`kubectl uncordon %s` once it may serve), then re-run; or leave it "+
				"out of this roll", f.node.Name, who, f.node.Name)
		},
	}
}
