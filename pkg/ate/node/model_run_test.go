package node

import (
	"os"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/internal/modelcheck"
	"github.com/rollbook/rollbook/pkg/runbook"
)

type aConfig struct {
	nodes                int
	wakes, misses, kills int8
	fails                int8 // v2 atelets that never become Ready
	// quiet: only a1 lives (a2 starts suspended too), a pod registers as it
	// is scheduled, an atelet is Ready as it starts: a smaller model.
	quiet                   bool
	idle                    bool // every actor starts suspended and stays so (no traffic): the nodes' moves alone
	drains                  int8 // workers a person drains by hand
	missWorkers, missActors bool
	person                  bool
	byNode                  bool
	back                    bool     // rollback next-node is a command too
	fix                     bool     // a person may clear a broken atelet's image cache, or fix a stuck pod
	stuck                   bool     // the clone's first pod never registers
	noClear                 bool     // seeded bug: a run never takes an unregistered pod off the node
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
	m := &aModel{nodes: c.nodes, rb: rb, rec: RecoverRunbook(nil, nil, nil, &RecoverConfig{}), byNode: c.byNode, back: c.back, quiet: c.quiet,
		fix: c.fix, clearing: !c.noClear, atomic: map[string]bool{}, memo: map[string]string{}, missWorkers: c.missWorkers, missActors: c.missActors, person: c.person}
	for _, id := range c.atomic {
		m.atomic[id] = true
	}
	init := aState{Wakes: c.wakes, Misses: c.misses, Kills: c.kills, Fails: c.fails, Drains: c.drains, MissPod: -1, MissActor: -1}
	for i := 0; i < c.nodes; i++ {
		init.Nodes[i] = mNode{Label: 0, Atelet: 0, Ready: true}
	}
	// The old pool serves from n1 and n2; its clone waits for a v2 node.
	init.Pods = [4]mPod{{Node: 0, Reg: true}, {Node: 1, Reg: true}, {Node: -1, Stuck: c.stuck}, {Node: -1}}
	// a1 runs on n1, a2 idled on n1 (snapshot there), a3 is suspended.
	init.Actors = [3]mActor{{St: mRunning, Worker: 0, Pin: -1}, {St: mPaused, Worker: -1, Pin: 0}, {St: mSuspended, Worker: -1,
		Pin: -1}}
	if c.quiet {
		init.Actors[1] = mActor{St: mSuspended, Worker: -1, Pin: -1}
	}
	if c.idle {
		init.Actors[0] = mActor{St: mSuspended, Worker: -1, Pin: -1}
	}
	return modelcheck.Model[aState]{
		Init:       []aState{init},
		Key:        key,
		Moves:      m.moves,
		Invariants: m.invariants(),
		Goals:      m.goals(c.fails, c.stuck),
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
	t.Logf("ate nodes, %d nodes, %d wake(s), %d list miss(es) (workers %v, actors %v), %d kill(s), %d failing atelet(s) (fixed %v), "+
		"%d hand drain(s), rollback %v, by node %v, atomic %v, person %v, dropped guard %q, skipped step %q: %s", c.nodes, c.wakes,
		c.misses, c.missWorkers, c.missActors, c.kills, c.fails, c.fix, c.drains, c.back, c.byNode, c.atomic, c.person, c.drop, c.skip,
		res)
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

// allSteps makes every step's calls follow its observation at once: the
// quick configurations of the long ways.
var allSteps = []string{"ate.node.mark", "ate.node.drain", "ate.node.suspend", "ate.node.flip", "ate.node.release",
	"ate.node.replace-drained", "ate.node.delete-old-pods", "ate.node.verify", "ate.recover.suspend", "ate.recover.delete-pods",
	"ate.recover.clear-marks"}

// TestModelATEBothWays explores the roll and its rollback as commands side
// by side — each run killed at any call, a v2 atelet that never becomes
// Ready (cleared by a person, or never), a worker a person drains by hand
// (recover-node, as status names it) — and asserts that from every
// reachable state both ways still finish: the rollback always (with no
// person's help for the atelet), the roll whenever the atelet can be fixed.
// "was:" is the canary whose new atelet never became Ready, rolled back
// (test/e2e/ate/wedge): the rollback waited at verify for drained workers
// nothing replaced.
func TestModelATEBothWays(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    aConfig
		tier modelcheck.Tier
	}{
		{"was: a canary whose new atelet never became Ready, rolled back", aConfig{nodes: 2, fails: 1, back: true, quiet: true,
			idle: true, atomic: allSteps}, modelcheck.Quick},
		{"a canary whose new atelet never became Ready, an actor on it", aConfig{nodes: 2, fails: 1, back: true, quiet: true},
			modelcheck.Full},
		{"a kill at every call, both ways", aConfig{nodes: 2, kills: 1, back: true, person: true, quiet: true}, modelcheck.Full},
		{"a kill at every call, both ways, every actor", aConfig{nodes: 2, kills: 1, back: true, person: true}, modelcheck.Long},
		{"a failing atelet a person clears, a kill", aConfig{nodes: 2, fails: 1, fix: true, kills: 1, back: true, person: true,
			quiet: true}, modelcheck.Full},
		{"a canary whose new workers never register, rolled back", aConfig{nodes: 2, stuck: true, back: true, quiet: true,
			idle: true, atomic: allSteps}, modelcheck.Quick},
		{"workers that never register, an actor, a kill", aConfig{nodes: 2, stuck: true, kills: 1, back: true, person: true,
			quiet: true}, modelcheck.Full},
		{"workers that never register until a person fixes them, a kill", aConfig{nodes: 2, stuck: true, fix: true, kills: 1,
			back: true, person: true, quiet: true}, modelcheck.Full},
		{"workers that never register until a person fixes them, traffic, a kill", aConfig{nodes: 2, stuck: true, fix: true,
			wakes: 1, kills: 1, back: true, person: true, quiet: true}, modelcheck.Long},
		{"a worker drained by hand: recover-node", aConfig{nodes: 2, drains: 1, back: true, quiet: true, idle: true, atomic: allSteps},
			modelcheck.Quick},
		{"a worker drained by hand, an actor: recover-node", aConfig{nodes: 2, drains: 1, back: true, person: true, quiet: true},
			modelcheck.Full},
		{"a failing atelet, traffic, a kill", aConfig{nodes: 2, fails: 1, wakes: 1, kills: 1, back: true, person: true, quiet: true},
			modelcheck.Long},
		{"a failing atelet, a missed worker or actor", aConfig{nodes: 2, fails: 1, misses: 1, missWorkers: true, missActors: true,
			back: true, person: true, quiet: true}, modelcheck.Full},
		{"a drained worker, a failing atelet a person clears, a kill", aConfig{nodes: 2, drains: 1, fails: 1, fix: true, kills: 1,
			back: true, person: true, quiet: true}, modelcheck.Long},
		{"three nodes: a failing atelet, a kill", aConfig{nodes: 3, fails: 1, kills: 1, back: true, person: true, quiet: true},
			modelcheck.Long},
		// Longer runs (ROLLBOOK_MODEL_LONG=1): the full environment.
		{"a failing atelet, a missed worker or actor, every actor", aConfig{nodes: 2, fails: 1, misses: 1, missWorkers: true,
			missActors: true, back: true, person: true}, modelcheck.Long},
		{"every disturbance: traffic, a kill, a failing atelet cleared, a drain, a missed item", aConfig{nodes: 2, wakes: 1, kills: 1,
			fails: 1, fix: true, drains: 1, misses: 1, missWorkers: true, missActors: true, back: true, person: true, quiet: true},
			modelcheck.Long},
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
	// Proving nothing is lost walks the whole space (24k states, half this
	// test's time): a full configuration, not the -short run's. Finding the
	// dropped guard below stops at the first counterexample.
	t.Run("the flip's guards hold with the suspend step broken", func(t *testing.T) {
		modelcheck.Full.Skip(t)
		if res := exploreATE(t, c); res.Violation != nil {
			t.Fatalf("with the suspend step broken the flip's guards must still hold:\n%s", res.Violation)
		}
	})
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

	// The wedge again: a replace-drained step that never acts leaves the
	// rolled-back canary serving nothing, and the goal says so.
	res = exploreATE(t, aConfig{nodes: 2, fails: 1, back: true, quiet: true, idle: true, atomic: allSteps,
		skip: "ate.node.replace-drained"})
	if res.Violation == nil || res.Violation.Invariant != "the rollback finishes stays reachable" {
		t.Fatalf("a rollback that cannot finish went unnoticed: %v", res.Violation)
	}
	t.Logf("seeded wedge caught:\n%s", res.Violation)

	// The wedge of a canary whose new workers never register: a run that
	// waits for them on every re-run never takes the node back.
	res = exploreATE(t, aConfig{nodes: 2, stuck: true, back: true, quiet: true, idle: true, atomic: allSteps, noClear: true})
	if res.Violation == nil || res.Violation.Invariant != "the rollback finishes stays reachable" {
		t.Fatalf("a rollback that waits for a pod that never registers went unnoticed: %v", res.Violation)
	}
	t.Logf("seeded unregistered wedge caught:\n%s", res.Violation)
}
