package runbook

import "fmt"

// Stage is how far a target has come through a runbook.
type Stage string

// The stages, in order.
const (
	// StageUntouched: the runbook's first step is not done, so nothing of
	// it is in effect on the target yet.
	StageUntouched Stage = "untouched"
	// StageHalfway: past the first step and not done — a run began here
	// and must be finished before another target is taken.
	StageHalfway Stage = "half-way"
	// StageDone: every step is done.
	StageDone Stage = "done"
)

// Position is where a target stands in a runbook, decided from its facts
// alone. It is the only place the rule is written: the engine, status, a
// runbook's "which target next" and the model checks all ask Locate.
type Position struct {
	// Step is the index of the first step not done; len(Steps) when done.
	Step int `json:"step"`
	// StepID is that step's ID, "" when done.
	StepID string `json:"stepID,omitempty"`
	// Evidence is what that step's Done saw.
	Evidence string `json:"evidence,omitempty"`
	// DoneEvidence is each step before it, with what its Done saw.
	DoneEvidence []string `json:"doneEvidence,omitempty"`
	// Guard is the first failing guard of that step ("name: reason"), ""
	// when it may act.
	Guard string `json:"guard,omitempty"`
	// SharedBudget says that guard spends a budget the run's targets share
	// (it may pass once another target ends).
	SharedBudget bool  `json:"sharedBudget,omitempty"`
	Stage        Stage `json:"stage"`
}

// Locate says where a target with facts f stands in rb.
func Locate[F any](rb *Runbook[F], f F) Position {
	p, _ := locate(rb, f, 0, AllParts, true)
	return p
}

// LocateOnly is Locate without deciding the step's guards (Guard stays
// empty): for readers that need only where targets stand — status across
// a fleet — not whether the next step may act, which can cost far more
// (a capacity guard weighs every actor).
func LocateOnly[F any](rb *Runbook[F], f F) Position {
	p, _ := locate(rb, f, 0, AllParts, false)
	return p
}

// locate is Locate from step index from on, for facts read only for the
// parts covered. It stops at the first step whose Done reads a part the
// facts were not read for, and reports that step (ok false): the caller
// observes again and locates from there.
func locate[F any](rb *Runbook[F], f F, from int, covered Parts, guards bool) (p Position, ok bool) {
	p.Step = len(rb.Steps)
	for i := from; i < len(rb.Steps); i++ {
		s := rb.Steps[i]
		if s.reads()&^covered != 0 {
			p.Step, p.StepID = i, s.ID
			p.Stage = stageOf(i, len(rb.Steps))
			return p, false
		}
		done, ev := s.Done(f)
		if done {
			p.DoneEvidence = append(p.DoneEvidence, ev)
			continue
		}
		p.Step, p.StepID, p.Evidence = i, s.ID, ev
		if !guards {
			break
		}
		if g, reason := failingGuard(s.Guards, f); g != nil {
			p.Guard, p.SharedBudget = reason, g.SharedBudget
		}
		break
	}
	p.Stage = stageOf(p.Step, len(rb.Steps))
	return p, true
}

func stageOf(step, steps int) Stage {
	switch {
	case step >= steps:
		return StageDone
	case step == 0:
		return StageUntouched
	default:
		return StageHalfway
	}
}

// String is the position as a person reads it: "done", or the step and
// why it is not done yet.
func (p Position) String() string {
	if p.Stage == StageDone {
		return "done"
	}
	s := fmt.Sprintf("%s (%s)", p.StepID, p.Evidence)
	if p.Guard != "" {
		s += "; blocked: " + p.Guard
	}
	return s
}

// failingGuard is the first guard that fails on f, with its reason.
func failingGuard[F any](guards []Guard[F], f F) (*Guard[F], string) {
	for i, g := range guards {
		if ok, reason := g.Check(f); !ok {
			return &guards[i], fmt.Sprintf("%s: %s", g.Name, reason)
		}
	}
	return nil, ""
}
