package runbook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// exclusion runs a run's Exclusive steps one at a time and lets a step
// whose shared budget is spent wait for another target of the run to end.
type exclusion struct {
	mu       sync.Mutex
	cond     *sync.Cond
	busy     bool // an Exclusive step is deciding or acting
	running  int  // targets in progress
	waiting  int  // of which: waiting for another to end
	finishes int  // targets ended (or back in service) so far
	// waiters are the seen counts of the targets waiting for an end, so a
	// target that took the budget an end freed can tell the others that
	// end is spent (took); back are the targets whose return to service
	// counted as their end already.
	waiters map[*int]struct{}
	back    map[string]bool
	// halted says why the run halted ("" while it goes on): a target not
	// yet out of service then takes no budget, and one waiting for a
	// budget stops waiting.
	halted string
	// spentAt is the count of ends at which a decision last found a
	// Uniform budget spent (-1: none since one passed): a target entering
	// before the next end waits for it before observing (untilUnspent).
	spentAt int
}

func newExclusion() *exclusion {
	e := &exclusion{waiters: map[*int]struct{}{}, back: map[string]bool{}, spentAt: -1}
	e.cond = sync.NewCond(&e.mu)
	return e
}

func (e *exclusion) started() { e.mu.Lock(); e.running++; e.mu.Unlock() }

// finished ends target name. Its end counts unless its return to service
// counted already (released): the budget it held was freed once, and a
// second end would wake every waiting target to observe again for nothing.
func (e *exclusion) finished(name string) {
	e.mu.Lock()
	e.running--
	if !e.back[name] {
		e.finishes++
	}
	delete(e.back, name)
	e.cond.Broadcast()
	e.mu.Unlock()
}

// released counts target name, back in service, as an end: the budget it
// held is free before the target's last steps run.
func (e *exclusion) released(name string) {
	e.mu.Lock()
	e.back[name] = true
	e.finishes++
	e.cond.Broadcast()
	e.mu.Unlock()
}

// took says the caller found the budget free and takes it, whether an end
// woke it or it had not waited: a target's end frees its one share of each
// budget, which the caller now holds again, so every waiter counts one of
// the ends it has not observed as seen. Without it every end woke every
// waiting target to observe (three requests each) and all but one found the
// budget spent: a cost that grew with how many targets waited, that is with
// how long the helpers of those in service took. A waiter skipped wrongly
// (an end that freed more than one share) is woken by the next end: the
// caller is now running, so there is one.
func (e *exclusion) took() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for seen := range e.waiters {
		if *seen != e.finishes {
			*seen++
		}
	}
}

// halt records that the run halted (why) and wakes the waiting targets.
func (e *exclusion) halt(why string) {
	e.mu.Lock()
	if e.halted == "" {
		e.halted = why
	}
	e.cond.Broadcast()
	e.mu.Unlock()
}

func (e *exclusion) haltedWhy() string { e.mu.Lock(); defer e.mu.Unlock(); return e.halted }

func (e *exclusion) wake() { e.mu.Lock(); e.cond.Broadcast(); e.mu.Unlock() }

// enter takes the exclusion and returns how many targets had ended, so a
// wait that follows counts only ends after the observation made inside.
func (e *exclusion) enter(ctx context.Context) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.busy && ctx.Err() == nil {
		e.cond.Wait()
	}
	e.busy = true
	return e.finishes
}

// spent records that a decision on an observation made after seen ends
// found a Uniform budget spent, or took its last share (or, !spent, that
// one passed with shares left).
func (e *exclusion) spent(seen int, spent bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case spent:
		e.spentAt = seen
	case e.spentAt == seen:
		e.spentAt = -1
	}
}

// untilUnspent is called holding the exclusion, entered when seen ends had
// been counted, before observing for an Exclusive step. When a decision
// since the last end found a Uniform budget spent, or took its last share
// (Guard.LastShare), the caller's observation would find the same: it
// waits for an end first (as a decision that failed would) and returns the
// new count. Without it every target reaching the step while the slots are
// full observes once for nothing (five requests in a tt roll).
func (e *exclusion) untilUnspent(ctx context.Context, seen int) int {
	e.mu.Lock()
	spent := e.spentAt == seen // (seen counts ends: never -1)
	e.mu.Unlock()
	if !spent {
		return seen
	}
	seen, _ = e.waitForAnEnd(ctx, seen, nil)
	return seen
}

func (e *exclusion) leave() {
	e.mu.Lock()
	e.busy = false
	e.cond.Broadcast()
	e.mu.Unlock()
}

// waitForAnEnd gives up the exclusion until another target of the run has
// ended since seen (an end the caller's observation may have missed counts)
// and the exclusion is free, or, when settle is set, until it reports true,
// then takes it again and returns the new count and whether either came.
// It reports false, at once, when no other target is in progress except
// ones waiting too and there is no settle: nothing will free the budget;
// with a settle it waits for it to give up. An end is not taken up while
// another target holds the exclusion: that one may take the budget the end
// freed (took) and spare this one an observation.
func (e *exclusion) waitForAnEnd(ctx context.Context, seen int, settle func(context.Context) bool) (int, bool) {
	var settled, settling atomic.Bool
	stop := func() {}
	if settle != nil {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		settling.Store(true)
		go func() {
			defer close(done)
			settled.Store(settle(sctx))
			settling.Store(false)
			e.wake()
		}()
		stop = func() { cancel(); <-done }
	}
	e.mu.Lock()
	e.busy = false
	e.waiting++
	e.waiters[&seen] = struct{}{}
	e.cond.Broadcast()
	claimed := false
	for !settled.Load() && ctx.Err() == nil {
		if e.halted != "" && !e.busy {
			break // the caller stops: decideExclusive reads the halt
		}
		if e.finishes != seen && !e.busy {
			// An end to observe, and the exclusion free to observe it in:
			// taken at once, so the other waiters the same end woke find
			// it busy and wait on (took may then spare them). Taken only
			// after the lock is given up below, every waiter the end's
			// broadcast woke got past this check first and observed in
			// turn, all but one for nothing (issue 45: a dozen at every
			// end of a 200-node roll).
			e.busy, claimed = true, true
			break
		}
		if e.finishes == seen && e.running-e.waiting <= 0 && !settling.Load() {
			break // nothing will free the budget
		}
		e.cond.Wait()
	}
	delete(e.waiters, &seen)
	e.waiting--
	ended := e.finishes != seen || settled.Load()
	e.mu.Unlock()
	stop() // outside the lock: the settle wakes the exclusion as it returns
	e.mu.Lock()
	defer e.mu.Unlock()
	if !claimed {
		for e.busy && ctx.Err() == nil {
			e.cond.Wait()
		}
		e.busy = true
	}
	return e.finishes, ended && ctx.Err() == nil
}

// enterExclusive takes the exclusion for step s of target t and decides its
// guards on a fresh observation of what s reads (see decideExclusive); prev
// is the target's last observation.
func enterExclusive[F any](ctx context.Context, rb *Runbook[F], s Step[F], t Target, e *exclusion, prev F,
	waiting func(reason string)) (F, string, error) {
	seen := e.untilUnspent(ctx, e.enter(ctx))
	facts, err := observeParts(ctx, rb, t, s.reads(), prev)
	if err != nil {
		e.leave()
		return facts, "", err
	}
	return decideExclusive(ctx, rb, s, t, e, facts, seen, waiting)
}

// decideExclusive decides step s's guards on facts observed while holding
// the exclusion (entered when seen ends had been counted); while a
// SharedBudget guard fails and another target of the run may still free the
// budget, it waits and observes again (saying so through waiting when the
// guard has a Settle: such a wait may be long). It returns holding the
// exclusion when the guards pass (the caller acts, then leaves) and without
// it when they block (reason) or observing failed.
func decideExclusive[F any](ctx context.Context, rb *Runbook[F], s Step[F], t Target, e *exclusion, facts F,
	seen int, waiting func(reason string)) (F, string, error) {
	for {
		if why := e.haltedWhy(); why != "" && (rb.OutOfService == nil || !rb.OutOfService(facts)) {
			// A halted run takes no more targets out of service: this one,
			// prefetched, had changed nothing yet.
			e.leave()
			return facts, "", haltedError(why)
		}
		g, reason := failingGuard(s.Guards, facts)
		if g == nil {
			e.took()
			e.spent(seen, tookLastShare(s.Guards, facts))
			return facts, "", nil
		}
		if g.SharedBudget && g.Uniform && g.Settle == nil {
			e.spent(seen, true)
		}
		if !g.SharedBudget { // only a spent budget may be freed by another target
			e.leave()
			return facts, reason, nil
		}
		var settle func(context.Context) bool
		if g.Settle != nil {
			check, f := g.Settle, facts
			settle = func(ctx context.Context) bool { return check(ctx, f) }
			waiting(reason)
		}
		var ended bool
		seen, ended = e.waitForAnEnd(ctx, seen, settle)
		if e.haltedWhy() != "" {
			continue // the top of the loop stops it, on facts it has not acted on since
		}
		if !ended {
			e.leave()
			return facts, reason, nil
		}
		var err error
		if facts, err = observeParts(ctx, rb, t, s.reads(), facts); err != nil {
			e.leave()
			return facts, "", err
		}
	}
}

// tookLastShare reports that a Uniform budget the guards passed on has no
// share left once the target passing takes its own.
func tookLastShare[F any](guards []Guard[F], facts F) bool {
	for _, g := range guards {
		if g.SharedBudget && g.Uniform && g.Settle == nil && g.LastShare != nil && g.LastShare(facts) {
			return true
		}
	}
	return false
}

// errHalted is decideExclusive's stop for a target the halted run will not
// take out of service.
var errHalted = errors.New("the run halted")

func haltedError(why string) error { return fmt.Errorf("%w: %s", errHalted, why) }
