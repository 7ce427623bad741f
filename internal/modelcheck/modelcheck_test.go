package modelcheck

import (
	"fmt"
	"strings"
	"testing"
)

// mutex is two processes entering a critical section, each at pc 0 (idle),
// 1 (wants in), 2 (inside). naive checks the other's flag and sets its own
// in two separate moves, so both can get in; with test-and-set they cannot.
type mutex struct {
	pc   [2]int
	flag [2]bool
}

func mutexModel(testAndSet bool) Model[mutex] {
	return Model[mutex]{
		Init: []mutex{{}},
		Key:  func(s mutex) string { return fmt.Sprint(s) },
		Moves: func(s mutex) []Move[mutex] {
			var out []Move[mutex]
			for p := 0; p < 2; p++ {
				n := s
				switch s.pc[p] {
				case 0:
					if testAndSet {
						if s.flag[1-p] {
							continue
						}
						n.flag[p], n.pc[p] = true, 2
					} else if !s.flag[1-p] {
						n.pc[p] = 1
					} else {
						continue
					}
				case 1:
					n.flag[p], n.pc[p] = true, 2
				case 2:
					n.flag[p], n.pc[p] = false, 0
				}
				out = append(out, Move[mutex]{Name: fmt.Sprintf("p%d: pc %d → %d", p, s.pc[p], n.pc[p]), Next: n})
			}
			return out
		},
		Invariants: []Invariant[mutex]{{Name: "one inside at most", Check: func(s mutex) string {
			if s.pc[0] == 2 && s.pc[1] == 2 {
				return "both processes are inside"
			}
			return ""
		}}},
		Done:     func(s mutex) bool { return s == mutex{} },
		Describe: func(s mutex) string { return fmt.Sprintf("  %+v", s) },
	}
}

func TestExploreFindsShortestCounterexample(t *testing.T) {
	res, err := Explore(mutexModel(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("naive mutex: %s", res)
	if res.Violation == nil {
		t.Fatal("the naive mutex lets both in; the explorer did not find it")
	}
	t.Log(res.Violation)
	// Shortest: p0 wants in, p1 wants in, p0 enters, p1 enters.
	if got := len(res.Violation.Trace); got != 4 {
		t.Errorf("trace has %d moves, want the shortest (4): %v", got, res.Violation.Trace)
	}
	if !strings.Contains(res.Violation.String(), "both processes are inside") {
		t.Errorf("report does not say what broke:\n%s", res.Violation)
	}
}

func TestExploreVisitsEveryStateOnce(t *testing.T) {
	res, err := Explore(mutexModel(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("test-and-set mutex: %s", res)
	if res.Violation != nil {
		t.Fatalf("unexpected violation:\n%s", res.Violation)
	}
	// idle/idle, one inside (×2): three states.
	if res.States != 3 || res.DoneStates != 1 {
		t.Errorf("states %d (want 3), finished %d (want 1)", res.States, res.DoneStates)
	}
}

func TestExploreReportsAStateThatCannotFinish(t *testing.T) {
	// A counter that may jump to a trap (-1) it never leaves.
	m := Model[int]{
		Init: []int{0},
		Key:  func(s int) string { return fmt.Sprint(s) },
		Moves: func(s int) []Move[int] {
			switch s {
			case 0:
				return []Move[int]{{Name: "step", Next: 1}, {Name: "fall into the trap", Next: -1}}
			case -1:
				return []Move[int]{{Name: "stay", Next: -1}}
			}
			return nil
		},
		Done: func(s int) bool { return s == 1 },
	}
	res, err := Explore(m)
	if err != nil {
		t.Fatal(err)
	}
	if res.Violation == nil || res.Violation.Trace[0] != "fall into the trap" {
		t.Fatalf("the trap was not reported: %+v", res.Violation)
	}
	t.Log(res.Violation)
}

func TestExploreRefusesAModelTooBig(t *testing.T) {
	m := Model[int]{
		Init:      []int{0},
		Key:       func(s int) string { return fmt.Sprint(s) },
		Moves:     func(s int) []Move[int] { return []Move[int]{{Name: "+1", Next: s + 1}} },
		MaxStates: 100,
	}
	if _, err := Explore(m); err == nil || !strings.Contains(err.Error(), "more than 100 states") {
		t.Fatalf("an unbounded model must be an error, got %v", err)
	}
}

// A door that can be opened and closed, and locked only while closed, with
// a key that may be lost: "opened" and "closed" are both goals, and a
// locked door whose key is lost can reach only one of them.
func TestExploreChecksEveryGoalFromEveryState(t *testing.T) {
	type door struct{ open, locked, lost bool }
	m := func(loseKey bool) Model[door] {
		return Model[door]{
			Init: []door{{}},
			Key:  func(s door) string { return fmt.Sprint(s) },
			Moves: func(s door) []Move[door] {
				var out []Move[door]
				n := s
				switch {
				case s.open:
					n.open = false
					out = append(out, Move[door]{Name: "close", Next: n})
				case s.locked && !s.lost:
					n.locked = false
					out = append(out, Move[door]{Name: "unlock", Next: n})
				case !s.locked:
					o, l := s, s
					o.open, l.locked = true, true
					out = append(out, Move[door]{Name: "open", Next: o}, Move[door]{Name: "lock", Next: l})
				}
				if loseKey && s.locked && !s.lost {
					n := s
					n.lost = true
					out = append(out, Move[door]{Name: "lose the key", Next: n})
				}
				return out
			},
			Goals: []Goal[door]{{Name: "the door is open", Done: func(s door) bool { return s.open }},
				{Name: "the door is closed", Done: func(s door) bool { return !s.open }}},
		}
	}
	res, err := Explore(m(false))
	if err != nil || res.Violation != nil {
		t.Fatalf("with the key kept both goals stay reachable: %v %v", err, res.Violation)
	}
	if res.GoalStates["the door is open"] != 1 || res.GoalStates["the door is closed"] != 2 {
		t.Errorf("goal states: %v", res.GoalStates)
	}
	res, err = Explore(m(true))
	if err != nil {
		t.Fatal(err)
	}
	if res.Violation == nil || res.Violation.Invariant != "the door is open stays reachable" ||
		res.Violation.Trace[len(res.Violation.Trace)-1] != "lose the key" {
		t.Fatalf("a lost key must leave the door unopenable: %+v", res.Violation)
	}
	t.Log(res.Violation)
}
