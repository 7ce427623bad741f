package runbook

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// targetRun is one target's pass through a runbook: observe, decide, act,
// verify, and finish (say what a stopped target leaves behind).
type targetRun[F any] struct {
	rb   *Runbook[F]
	t    Target
	o    Options
	excl *exclusion
	// facts is the last observation; covered the parts it was read for.
	facts   F
	covered Parts
	tr      TargetResult
	// clockStep is the step a clock found on the target names.
	clockStep string
	// held is the Exclusive step whose exclusion was taken before the last
	// observation (made right after the step before it acted), so that
	// observation serves as the one made inside the exclusion; heldSeen is
	// the count of ended targets when it was taken.
	held, heldSeen int
	// staleClock is a finished step whose clock may still be on the
	// target: removed after the next step acts unless that step's own
	// write removed it, and before the target's run ends in any case.
	staleClock string
}

func runTargetOnce[F any](ctx context.Context, rb *Runbook[F], t Target, o Options, excl *exclusion) TargetResult {
	r := &targetRun[F]{rb: rb, t: t, o: o, excl: excl, held: -1,
		tr: TargetResult{Target: t.Name(), Ref: t.Ref(), Outcome: OutcomeDone, State: "done"}}
	defer r.release()
	return r.run(ctx)
}

func (r *targetRun[F]) run(ctx context.Context) TargetResult {
	if err := r.observe(ctx); err != nil {
		return r.failed("unknown", err)
	}
	if r.rb.Annotation != nil && !r.o.DryRun {
		if v, ok := r.rb.Annotation(r.facts, TimerKey(r.rb.Name)); ok {
			r.clockStep, _, _ = cut(v)
		}
	}
	steps := r.rb.Steps
	first := true
	for i := 0; i < len(steps); {
		pos, complete := locate(r.rb, r.facts, i, r.covered, true)
		if r.held >= 0 && r.held != pos.Step {
			r.excl.leave() // the Exclusive step it was taken for is done already
			r.held = -1
		}
		if id, err := r.passDone(ctx, i, pos); err != nil {
			return r.failed(id, fmt.Errorf("clear step clock: %w", err))
		}
		if i = pos.Step; i == len(steps) {
			break
		}
		if !complete {
			// The step before acted and the one after it was done already:
			// this step decides on parts that observation did not read.
			// When it spends a shared budget, the exclusion is taken first
			// and this observation, of what the step reads, is the one made
			// inside it (not a second).
			if s := steps[i]; s.Exclusive && r.held < 0 && !r.o.DryRun {
				r.heldSeen, r.held = r.excl.untilUnspent(ctx, r.excl.enter(ctx)), i
				// Only what this step reads: the parts already read are
				// carried, as an Exclusive step's wait carries them.
				f, err := observeParts(ctx, r.rb, r.t, s.reads(), r.facts)
				if err != nil {
					return r.failed(s.ID, fmt.Errorf("observe: %w", err))
				}
				r.facts, r.covered = f, r.covered|s.reads()
				continue
			}
			if err := r.observe(ctx); err != nil {
				return r.failed(steps[i].ID, err)
			}
			continue
		}
		s := steps[i]
		sr := StepResult{ID: s.ID, Title: s.Title, Budget: s.Timeout, Evidence: pos.Evidence}
		next := first
		if first {
			first, r.tr.State = false, s.ID
		}
		if r.o.DryRun {
			r.plan(s, sr, next)
			i++
			continue
		}
		if stopped, ok := r.decide(ctx, i, pos, sr); !ok {
			return stopped
		}
		if stopped, ok := r.actAndVerify(ctx, i, sr); !ok {
			return stopped
		}
		i++
	}
	if !r.o.DryRun {
		r.tr.State = "done"
	}
	return r.tr
}

func (r *targetRun[F]) observe(ctx context.Context) error {
	f, err := r.rb.Observe(ctx, r.t)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	r.facts, r.covered = f, AllParts
	return nil
}

// passDone reports the steps from `from` to pos.Step as done, clearing a clock left
// by an interrupted run of one of them (finished by that run, or by hand):
// it must not bill a later run.
func (r *targetRun[F]) passDone(ctx context.Context, from int, pos Position) (string, error) {
	for j := from; j < pos.Step; j++ {
		s := r.rb.Steps[j]
		if r.clockStep == s.ID {
			if err := r.t.SetAnnotation(ctx, TimerKey(r.rb.Name), nil); err != nil {
				return s.ID, err
			}
			r.clockStep = ""
		}
		sr := StepResult{ID: s.ID, Title: s.Title, Budget: s.Timeout, Status: StepDone, Evidence: pos.DoneEvidence[j-from]}
		r.tr.Steps = append(r.tr.Steps, sr)
		r.o.Reporter.Step(r.t.Name(), sr)
	}
	return "", nil
}

// plan reports what a dry run would do at step s.
func (r *targetRun[F]) plan(s Step[F], sr StepResult, next bool) {
	sr.Status = StepPending
	if next {
		sr.Status = StepWouldAct
	}
	if s.Plan != nil {
		sr.Changes = s.Plan(r.facts)
	}
	r.tr.Steps = append(r.tr.Steps, sr)
	r.o.Reporter.Step(r.t.Name(), sr)
	r.tr.Outcome = OutcomePlanned
}

// decide checks step i's guards: on the position for an ordinary step, on
// an observation made inside the exclusion for an Exclusive one (which
// returns holding it). ok false: the target stopped, with its result.
func (r *targetRun[F]) decide(ctx context.Context, i int, pos Position, sr StepResult) (TargetResult, bool) {
	s := r.rb.Steps[i]
	reason := pos.Guard
	if s.Exclusive {
		waiting := func(why string) {
			r.o.Reporter.Step(r.t.Name(), StepResult{ID: s.ID, Title: s.Title, Status: StepActing, Evidence: "waiting: " + why})
		}
		var err error
		if r.held == i {
			r.held = -1 // decideExclusive leaves it, or actAndVerify does
			r.facts, reason, err = decideExclusive(ctx, r.rb, s, r.t, r.excl, r.facts, r.heldSeen, waiting)
		} else {
			r.facts, reason, err = enterExclusive(ctx, r.rb, s, r.t, r.excl, r.facts, waiting)
		}
		if errors.Is(err, errHalted) {
			sr.Status, sr.Error = StepPending, err.Error()
			r.tr.Error = sr.Error
			return r.finish(sr, i, OutcomeSkipped), false
		}
		if err != nil {
			return r.failed(s.ID, fmt.Errorf("observe: %w", err)), false
		}
	}
	if reason != "" {
		sr.Status, sr.Error = StepBlocked, reason
		return r.finish(sr, i, OutcomeBlocked), false
	}
	return TargetResult{}, true
}

// actAndVerify acts on step i and verifies its effect on a fresh
// observation of what its Done and the next step read.
func (r *targetRun[F]) actAndVerify(ctx context.Context, i int, sr StepResult) (TargetResult, bool) {
	rb, s := r.rb, r.rb.Steps[i]
	wasOut := rb.OutOfService != nil && rb.OutOfService(r.facts)
	var enterNext func()
	if !s.Exclusive && i+1 < len(rb.Steps) && rb.Steps[i+1].Exclusive {
		// The next step decides a shared budget: take its exclusion before
		// observing this step's result, and that observation is the next
		// step's, saving a second one.
		enterNext = func() { r.heldSeen, r.held = r.excl.untilUnspent(ctx, r.excl.enter(ctx)), i+1 }
	}
	parts := s.doneReads()
	if i+1 < len(rb.Steps) {
		parts |= rb.Steps[i+1].reads()
	}
	read := parts
	if s.Wait == nil {
		// What Act leaves as it was, and the observation it acted on read,
		// serves again.
		read &^= s.Unchanged & r.covered
	}
	var afterAct func()
	if s.Exclusive {
		// The budget is spent once Act's writes are in (the next target's
		// observation inside the exclusion sees them): the Wait and the
		// observation of the result need not hold up the other targets.
		left := false
		afterAct = func() {
			if !left {
				left = true
				r.excl.leave()
			}
		}
	}
	sr, err := r.act(ctx, s, sr, enterNext, afterAct, read, parts)
	if r.staleClock != "" {
		if cerr := r.clearStaleClock(ctx); cerr != nil && err == nil {
			err = fmt.Errorf("clear the clock of the step before: %w", cerr)
		}
	}
	if sr.staleClock {
		r.staleClock = s.ID
	}
	if afterAct != nil {
		afterAct() // Act did not run
	}
	if err == nil && wasOut && !rb.OutOfService(r.facts) {
		// Back in service (uncordoned): a target waiting for the budget
		// need not wait for this one's remaining steps (cleanup).
		r.excl.released(r.t.Name())
	}
	if err != nil {
		outcome := OutcomeFailed
		switch {
		case ctx.Err() != nil:
			sr.Status, outcome = StepInterrupted, OutcomeInterrupted
		case IsBlocked(err):
			sr.Status, outcome = StepBlocked, OutcomeBlocked
		default:
			sr.Status = StepFailed
		}
		sr.Error = err.Error()
		r.tr.cause = err
		return r.finish(sr, i, outcome), false
	}
	r.tr.Steps = append(r.tr.Steps, sr)
	return TargetResult{}, true
}

// act runs one step: start (or resume) its clock, act, wait, re-observe the
// parts to read (the rest of those it covers are carried) and verify, then
// stop the clock. afterAct, when set, runs
// as soon as Act returns; beforeObserve just before the observation of the
// result.
func (r *targetRun[F]) act(ctx context.Context, s Step[F], sr StepResult, beforeObserve, afterAct func(),
	read, covers Parts) (StepResult, error) {
	o := r.o
	start := o.Now()
	stepCtx := WithStep(ctx, s.ID)
	var clock *stepClock
	if s.Timeout > 0 {
		started, stored, err := resumeClock(ctx, r.clockReader(), r.rb.Name, s.ID, o.Now())
		if err != nil {
			return sr, err
		}
		clock = keepClock(ctx, r.t, r.rb.Name, s.ID, started, stored, o.clockDelay())
		sr.Started = &started
		var cancel context.CancelFunc
		// What is left of the budget on o.Now's clock (the API server's,
		// when the session says so), as a timeout of this machine's.
		stepCtx, cancel = context.WithTimeoutCause(stepCtx, started.Add(s.Timeout).Sub(o.Now()),
			fmt.Errorf("step %q ran out of its %s budget (started %s)", s.Title, s.Timeout, started.Format(time.RFC3339)))
		defer cancel()
	}
	// An interrupted step keeps its clock; one that ended (done, blocked or
	// failed, and said so) clears it, so a re-run after a fix gets a fresh
	// budget.
	stopClock := func(keep bool) error {
		if clock == nil {
			return nil
		}
		return clock.stop(ctx, keep)
	}
	sr.Status = StepActing
	o.Reporter.Step(r.t.Name(), sr)
	err := s.Act(stepCtx, r.facts)
	if afterAct != nil {
		afterAct()
	}
	if err == nil && s.Wait != nil {
		sr.Status = StepWaiting
		o.Reporter.Step(r.t.Name(), sr)
		err = s.Wait(stepCtx, r.facts)
	}
	if err != nil {
		if cause := context.Cause(stepCtx); cause != nil && ctx.Err() == nil && !errors.Is(err, cause) {
			// Keep err's chain (a BlockedError must stay blocked).
			err = fmt.Errorf("%v: %w", cause, err)
		}
		sr.Duration = o.Now().Sub(start)
		_ = stopClock(ctx.Err() != nil)
		return sr, err
	}
	if beforeObserve != nil {
		beforeObserve()
	}
	observed, err := observeParts(ctx, r.rb, r.t, read, r.facts)
	if err != nil {
		_ = stopClock(ctx.Err() != nil)
		return sr, fmt.Errorf("observe after acting: %w", err)
	}
	r.facts, r.covered = observed, covers
	done, ev := s.Done(r.facts)
	sr.Duration = o.Now().Sub(start)
	if !done {
		_ = stopClock(false)
		return sr, fmt.Errorf("acted, but the result is not visible in the cluster: %s", ev)
	}
	if clock != nil && r.rb.Annotation != nil {
		// Done: the clock goes, but not by a write of its own. The next
		// step's write may take it along (a runbook that records a result
		// removes the clock in the same patch); what is still there once
		// that step has acted is removed then.
		if clock.settle() {
			sr.staleClock = true
		}
	} else if err := stopClock(false); err != nil {
		return sr, err
	}
	sr.Status, sr.Evidence = StepActed, ev
	o.Reporter.Step(r.t.Name(), sr)
	return sr, nil
}

// observeParts observes the parts asked for, carrying the rest from prev,
// when the runbook can; everything otherwise.
func observeParts[F any](ctx context.Context, rb *Runbook[F], t Target, parts Parts, prev F) (F, error) {
	if rb.ObserveParts == nil || parts == AllParts {
		return rb.Observe(ctx, t)
	}
	return rb.ObserveParts(ctx, t, parts, prev)
}

func (s Step[F]) doneReads() Parts {
	if s.DoneReads != 0 {
		return s.DoneReads
	}
	return s.reads()
}

func (s Step[F]) reads() Parts {
	if s.Reads == 0 {
		return AllParts
	}
	return s.Reads
}

// failed ends the target failed at step id.
func (r *targetRun[F]) failed(id string, err error) TargetResult {
	r.tr.Outcome, r.tr.State, r.tr.Error, r.tr.cause = OutcomeFailed, id, err.Error(), err
	return r.tr
}

// release gives up what the run still holds when the target's run ends: an
// exclusion taken for a step it never reached, a done step's clock.
func (r *targetRun[F]) release() {
	if r.held >= 0 {
		r.excl.leave()
		r.held = -1
	}
	if r.staleClock != "" {
		_ = r.clearStaleClock(context.Background())
	}
}

// finish records the step that stopped the target, marks the rest pending
// and attaches the runbook's notes for a person.
func (r *targetRun[F]) finish(sr StepResult, i int, outcome Outcome) TargetResult {
	rb, tr := r.rb, &r.tr
	tr.Outcome = outcome
	tr.State = sr.ID
	tr.Steps = append(tr.Steps, sr)
	r.o.Reporter.Step(r.t.Name(), sr)
	for _, s := range rb.Steps[i+1:] {
		tr.Steps = append(tr.Steps, StepResult{ID: s.ID, Title: s.Title, Status: StepPending})
	}
	if rb.Notes != nil || rb.OutOfService != nil {
		// Say what the run leaves behind as it is now, even after Ctrl-C.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		facts := r.facts
		if fresh, err := rb.Observe(ctx, r.t); err == nil {
			facts = fresh
		}
		if rb.Notes != nil {
			tr.Notes = rb.Notes(facts)
		}
		tr.holdsSlot = rb.OutOfService != nil && rb.OutOfService(facts)
	}
	return *tr
}
