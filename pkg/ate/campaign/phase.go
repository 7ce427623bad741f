package campaign

import (
	"fmt"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The roll as a whole is a runbook over the fleet's facts: its phase is
// where runbook.Locate puts it, the rule every other position is decided
// by. The runbook only reads: each step is done by a command of its own
// (or by hand), which its phase names.

// fleetFacts is what status read of the fleet.
type fleetFacts struct {
	c   *fleet.Cluster
	inv *ateapi.Inventory // nil: the control API was not read
	// moves are the nodes the Locator finds half-way.
	moves          []node.HalfMoved
	oldPodsRunning int
	actorsOnOld    int
}

// retired: the old pools and atelet are gone and the clones serve, every
// node at the one version left. Every step counts as done then.
func (f fleetFacts) retired() bool {
	return f.c.New == "" && clonesServing(f.c) && f.c.AllAt(f.c.Old)
}

func (f fleetFacts) atNew() int { return len(f.c.NodesAt(f.c.New)) }

// phase is what status says at each step of the roll's runbook: the phase,
// the summary and the next command.
type phase struct {
	Phase
	summary, next func(f fleetFacts) string
}

// The roll's steps, in order, with what status says while each is the
// first not done.
var (
	rollRunbook = &runbook.Runbook[fleetFacts]{Name: "ate-campaign", Title: "The Agent Substrate roll",
		Steps: []runbook.Step[fleetFacts]{
			{ID: "ate.campaign.dataplane", Title: "Deploy the NEW atelet (steps 1–3)", Done: func(f fleetFacts) (bool, string) {
				return f.c.New != "" || f.retired(), "NEW atelet " + f.c.New
			}},
			// The clone runbook's own verdict (roll.Cloned).
			{ID: "ate.campaign.clone", Title: "Clone the serving pools (step 4)", Done: func(f fleetFacts) (bool, string) {
				return f.retired() || roll.Cloned(f.c), "pools cloned"
			}},
			{ID: "ate.campaign.first-node", Title: "Move the first node (step 5)", Done: func(f fleetFacts) (bool, string) {
				return f.retired() || f.atNew() > 0 || len(f.moves) > 0, fmt.Sprintf("%d node(s) at %s", f.atNew(), f.c.New)
			}},
			{ID: "ate.campaign.nodes", Title: "Move every node (step 5)", Done: func(f fleetFacts) (bool, string) {
				return f.retired() || f.atNew() == len(f.c.Nodes) && len(f.moves) == 0, "every node at " + f.c.New
			}},
			{ID: "ate.campaign.vacate", Title: "Actors leave the old pools' workers", Done: func(f fleetFacts) (bool, string) {
				v := f.vacate()
				return f.retired() || v.ok, v.summary
			}},
			{ID: "ate.campaign.retire", Title: "Retire the old pools and atelet (step 7)", Done: func(f fleetFacts) (bool, string) {
				return f.retired(), fmt.Sprintf("roll complete: every node at %s, the old pools and atelet retired; the clones serve",
					f.c.Old)
			}},
		}}
	phases = map[string]phase{
		"ate.campaign.dataplane": {PhaseNotStarted,
			func(f fleetFacts) string { return fmt.Sprintf("every node at %s; no NEW atelet DaemonSet", f.c.Old) },
			func(fleetFacts) string {
				return "apply the new CRDs, deploy ate-controller and the new atelet from the new release (steps 1–3), then: " +
					"kubectl ate preflight"
			}},
		"ate.campaign.clone": {PhasePrepared,
			func(f fleetFacts) string {
				return fmt.Sprintf("NEW atelet %s is installed; %d of %d serving pool(s) cloned", f.c.New, countClones(f.c),
					len(f.c.OldPools()))
			},
			func(fleetFacts) string { return "kubectl ate roll clone-pools --image <new worker image>@sha256:…" }},
		"ate.campaign.first-node": {PhaseCloned,
			func(f fleetFacts) string {
				return fmt.Sprintf("pools cloned; 0 of %d nodes at %s", len(f.c.Nodes), f.c.New)
			},
			func(fleetFacts) string { return "kubectl ate preflight && kubectl ate roll next-node" }},
		"ate.campaign.nodes": {PhaseRolling,
			func(f fleetFacts) string {
				s := fmt.Sprintf("%d of %d nodes at %s", f.atNew(), len(f.c.Nodes), f.c.New)
				if len(f.moves) > 0 {
					s += fmt.Sprintf("; node %s is half-way (%s)", f.moves[0].Node, f.moves[0].Step())
				}
				return s
			},
			func(fleetFacts) string { return "kubectl ate roll next-node" }},
		"ate.campaign.vacate": {PhaseRolled,
			func(f fleetFacts) string { return f.vacate().summary },
			func(f fleetFacts) string { return f.vacate().next }},
		"ate.campaign.retire": {PhaseRetireable,
			func(f fleetFacts) string {
				return fmt.Sprintf("every node at %s; no actor on an old-pool worker", f.c.New)
			},
			func(fleetFacts) string {
				return "upgrade the control plane (step 6), let it soak, then: kubectl ate retire (ends the rollback option)"
			}},
		"": {PhaseComplete,
			func(f fleetFacts) string {
				return fmt.Sprintf("roll complete: every node at %s, the old pools and atelet retired; the clones serve", f.c.Old)
			},
			func(fleetFacts) string {
				return "upgrade the control plane (step 6) if not done yet; for the next upgrade: ate-setup deploy atelet from " +
					"the new release, then kubectl ate preflight"
			}},
	}
)

// vacated is whether the old pools' workers are known to host no actor
// any more, and else why not and what to do.
type vacated struct {
	ok            bool
	summary, next string
}

func (f fleetFacts) vacate() vacated {
	c, inv := f.c, f.inv
	switch {
	case f.oldPodsRunning > 0 || inv != nil && f.actorsOnOld > 0:
		v := vacated{summary: fmt.Sprintf("every node at %s; %d actor(s) still on old-pool workers, %d old-pool pod(s) Running", c.New,
			f.actorsOnOld, f.oldPodsRunning)}
		if inv == nil {
			v.summary = fmt.Sprintf("every node at %s; %d old-pool pod(s) Running; actors not read (no control API)", c.New,
				f.oldPodsRunning)
		}
		v.next = "wait for those actors to suspend or move; then upgrade the control plane (step 6)"
		return v
	case inv == nil:
		// Nothing claims what it did not observe: without the control API
		// no one knows whether an actor is still on an old-pool worker.
		return vacated{summary: fmt.Sprintf("every node at %s; whether an actor is still on an old-pool worker is "+
			"unknown: the control API was not read", c.New),
			next: "kubectl ate status with the control API reachable (no --no-api), before retiring"}
	case len(inv.Unreadable) > 0:
		return vacated{summary: fmt.Sprintf("every node at %s; whether an actor is still on an old-pool worker is "+
			"unknown: the actors of atespace(s) %s cannot be read with this client's token", c.New, fleet.Brief(inv.UnreadableAtespaces())),
			next: "allow the client's identity to list and get actors in those atespaces, then: kubectl ate status"}
	}
	if u := fleet.UnservedClones(inv, c.PoolsPinnedTo(c.Old), c.Pools); len(u) > 0 {
		return vacated{summary: fmt.Sprintf("every node at %s; no worker serves for %s (registered, ACTIVE, capacity "+
			"reported)", c.New, fleet.Brief(u)),
			next: "find why the clone's pods do not serve (kubectl get pods -l " + fleet.PoolLabel + "; a ResourceQuota, a " +
				"taint, an image of another architecture) before retiring"}
	}
	return vacated{ok: true, summary: "no actor on an old-pool worker"}
}

// phaseOf is where the roll stands in its runbook, as status says it.
func phaseOf(f fleetFacts) (Phase, string, string) {
	p := phases[runbook.LocateOnly(rollRunbook, f).StepID]
	return p.Phase, p.summary(f), p.next(f)
}
