// Package modelcheck explores every reachable state of a small model,
// breadth first, and checks invariants in each one. A model is its initial
// states, a canonical key per state, and the moves (environment and CLI)
// enabled in a state. A broken invariant comes back with the shortest
// sequence of moves that reaches it, so a failure reads as a story.
//
// It is a test tool: the runbooks' models (pkg/ate, pkg/tt) drive the
// runbooks' real Done, Guards and Plan functions through it.
package modelcheck

import (
	"fmt"
	"strings"
	"time"
)

// Move is one transition: who did what, and the state it leads to.
type Move[S any] struct {
	// Name says what happened ("env: actor a1 wakes on worker o1",
	// "cli: ate.node.flip on n1: label n1 v2").
	Name string
	Next S
}

// Invariant must hold in every reachable state.
type Invariant[S any] struct {
	Name string
	// Check returns "" when the invariant holds, else what is wrong.
	Check func(s S) string
}

// Model is what Explore walks.
type Model[S any] struct {
	Init []S
	// Key is a canonical encoding of a state: equal keys, same state.
	Key func(s S) string
	// Moves lists every move enabled in s.
	Moves      func(s S) []Move[S]
	Invariants []Invariant[S]
	// Done, when set, marks the states where the work is finished. Explore
	// then also checks that from every reachable state some path reaches a
	// Done state (the roll can always still finish).
	Done func(s S) bool
	// Goals are more ends the work may be taken to, each checked as Done
	// is: from every reachable state some path reaches each goal (a roll
	// and its rollback: from wherever it stopped, both ways still finish).
	Goals []Goal[S]
	// Describe, when set, renders a state for the counterexample.
	Describe func(s S) string
	// MaxStates bounds the search; reaching it is an error (the model is
	// too big to be exhaustive), never a silent pass.
	MaxStates int
}

// Goal is an end the work must always still be able to reach.
type Goal[S any] struct {
	// Name says what is finished ("the roll finishes").
	Name string
	Done func(s S) bool
}

// Violation is a broken invariant and how to get there.
type Violation struct {
	Invariant string
	Detail    string
	// Trace is the moves from an initial state, in order.
	Trace []string
	// State is the violating state (Describe), if the model renders it.
	State string
}

func (v *Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invariant %q broken: %s\ncounterexample (%d moves):\n", v.Invariant, v.Detail, len(v.Trace))
	for i, m := range v.Trace {
		fmt.Fprintf(&b, "  %3d. %s\n", i+1, m)
	}
	if v.State != "" {
		fmt.Fprintf(&b, "state:\n%s\n", v.State)
	}
	return b.String()
}

// Result is what one exploration found.
type Result struct {
	States      int // distinct states reached
	Transitions int // moves taken, duplicates included
	Depth       int // longest shortest path from an initial state
	DoneStates  int // states where Done holds (when Done is set)
	// GoalStates counts, per goal name, the states where it holds.
	GoalStates map[string]int
	Elapsed    time.Duration
	// Violation is the first broken invariant found (shortest trace), nil
	// when none.
	Violation *Violation
}

func (r Result) String() string {
	s := fmt.Sprintf("%d states, %d transitions, depth %d, %d finished states, %s", r.States, r.Transitions, r.Depth,
		r.DoneStates, r.Elapsed.Round(time.Millisecond))
	for name, n := range r.GoalStates {
		s += fmt.Sprintf(", %d state(s) where %s", n, name)
	}
	if r.Violation != nil {
		s += "; VIOLATION " + r.Violation.Invariant
	}
	return s
}

type node struct {
	parent int32 // index of the parent, -1 for an initial state
	move   string
	depth  int32
}

// Explore visits every state reachable from m.Init, breadth first.
func Explore[S any](m Model[S]) (Result, error) {
	start := time.Now()
	index := map[string]int32{}
	var nodes []node
	var states []S
	var edges [][2]int32 // for the Done check: from → to
	res := Result{}
	fail := func(at int32, inv, detail string) {
		v := &Violation{Invariant: inv, Detail: detail, Trace: trace(nodes, at)}
		if m.Describe != nil {
			v.State = m.Describe(states[at])
		}
		res.Violation = v
	}
	check := func(at int32) bool {
		for _, inv := range m.Invariants {
			if d := inv.Check(states[at]); d != "" {
				fail(at, inv.Name, d)
				return false
			}
		}
		return true
	}
	add := func(s S, parent int32, move string, depth int32) (int32, bool, error) {
		k := m.Key(s)
		if i, ok := index[k]; ok {
			return i, false, nil
		}
		if m.MaxStates > 0 && len(nodes) >= m.MaxStates {
			return 0, false, fmt.Errorf("more than %d states: the model is too big to explore exhaustively", m.MaxStates)
		}
		i := int32(len(nodes))
		index[k] = i
		nodes = append(nodes, node{parent: parent, move: move, depth: depth})
		states = append(states, s)
		return i, true, nil
	}
	for _, s := range m.Init {
		i, fresh, err := add(s, -1, "", 0)
		if err != nil {
			return res, err
		}
		if fresh && !check(i) {
			return finish(res, nodes, start), nil
		}
	}
	for head := int32(0); int(head) < len(nodes); head++ {
		s := states[head]
		for _, mv := range m.Moves(s) {
			res.Transitions++
			i, fresh, err := add(mv.Next, head, mv.Name, nodes[head].depth+1)
			if err != nil {
				return finish(res, nodes, start), err
			}
			if m.Done != nil || len(m.Goals) > 0 {
				edges = append(edges, [2]int32{head, i})
			}
			if fresh && !check(i) {
				return finish(res, nodes, start), nil
			}
		}
	}
	if m.Done != nil {
		if at, n := unfinishable(states, edges, m.Done); at >= 0 {
			fail(at, "a finished state stays reachable", fmt.Sprintf("no sequence of moves leads from this state to a finished one "+
				"(%d such states)", n))
		}
		for _, s := range states {
			if m.Done(s) {
				res.DoneStates++
			}
		}
		if res.Violation == nil && res.DoneStates == 0 {
			return finish(res, nodes, start), fmt.Errorf("no finished state is reachable: the model never completes")
		}
	}
	for _, g := range m.Goals {
		if res.GoalStates == nil {
			res.GoalStates = map[string]int{}
		}
		for _, s := range states {
			if g.Done(s) {
				res.GoalStates[g.Name]++
			}
		}
		if res.Violation != nil {
			continue
		}
		if res.GoalStates[g.Name] == 0 {
			return finish(res, nodes, start), fmt.Errorf("no state where %s is reachable: the model never gets there", g.Name)
		}
		if at, n := unfinishable(states, edges, g.Done); at >= 0 {
			fail(at, g.Name+" stays reachable", fmt.Sprintf("no sequence of moves leads from this state to one where %s "+
				"(%d such states)", g.Name, n))
		}
	}
	return finish(res, nodes, start), nil
}

func finish(res Result, nodes []node, start time.Time) Result {
	res.States = len(nodes)
	for _, n := range nodes {
		res.Depth = max(res.Depth, int(n.depth))
	}
	res.Elapsed = time.Since(start)
	return res
}

func trace(nodes []node, at int32) []string {
	var out []string
	for i := at; nodes[i].parent >= 0; i = nodes[i].parent {
		out = append(out, nodes[i].move)
	}
	for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
		out[l], out[r] = out[r], out[l]
	}
	return out
}

// unfinishable returns a state from which no Done state is reachable, and
// how many there are; -1 if none. It prefers the shallowest dead end (a
// state with no move to another state): the clearest story of being stuck.
func unfinishable[S any](states []S, edges [][2]int32, done func(S) bool) (int32, int) {
	back := make([][]int32, len(states))
	leaves := make([]bool, len(states))
	for i := range leaves {
		leaves[i] = true
	}
	for _, e := range edges {
		back[e[1]] = append(back[e[1]], e[0])
		if e[0] != e[1] {
			leaves[e[0]] = false
		}
	}
	ok := make([]bool, len(states))
	var queue []int32
	for i, s := range states {
		if done(s) {
			ok[i] = true
			queue = append(queue, int32(i))
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, p := range back[i] {
			if !ok[p] {
				ok[p] = true
				queue = append(queue, p)
			}
		}
	}
	first, dead, n := int32(-1), int32(-1), 0
	for i := range ok {
		if !ok[i] {
			if first < 0 {
				first = int32(i)
			}
			if dead < 0 && leaves[i] {
				dead = int32(i)
			}
			n++
		}
	}
	if dead >= 0 {
		return dead, n
	}
	return first, n
}
