package runbook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Reporter receives live progress; pkg/ui renders it.
type Reporter interface {
	// Step is called whenever a step of target changes status.
	Step(target string, s StepResult)
	// TargetDone is called once per target with its final result.
	TargetDone(r TargetResult)
}

// Options tune a run.
type Options struct {
	RunID  string
	DryRun bool
	// Parallel is how many targets may be in progress at once (default 1).
	// A target holds its slot from its first action to its last step, so
	// for a cordon…uncordon runbook it bounds the nodes out of service.
	Parallel int
	// Prefetch lets this many more targets start their steps while Parallel
	// are in progress, so the next node's preparation (a probe) overlaps the
	// current batch. Only for runbooks whose out-of-service budget is
	// enforced by an Exclusive step's guard: that guard, not the slot,
	// bounds the nodes out of service. Ignored with Soak (a canary must end
	// before the next target starts).
	Prefetch int
	// KeepGoing continues with other targets after one is blocked or fails;
	// by default the run halts (targets in progress finish their step).
	KeepGoing bool
	Reporter  Reporter
	// Paused, when set, is asked before each target starts; a paused roll
	// starts no new target (targets in progress finish) and ends "paused".
	Paused func(ctx context.Context) (paused bool, why string)
	// Soak waits this long, checking Health, before the next target: once
	// after the first Canary targets this run acted on, or (Canary 0) after
	// every one. A failed check ends the roll "paused" and calls
	// OnHealthFailure (which persists the pause).
	Soak            time.Duration
	Canary          int
	Health          func(ctx context.Context) error
	OnHealthFailure func(ctx context.Context, why string)
	// Now is the clock; tests may fix it.
	Now func() time.Time
	// excl serializes Exclusive steps across the run's targets (set by Run).
	excl *exclusion
	// RetryBackoff is the first wait before a target that failed on a
	// transient API error is observed again (default 1 s; doubles, at most 8×).
	RetryBackoff time.Duration
	// ClockDelay overrides ClockDelay (tests).
	ClockDelay time.Duration
}

func (o Options) clockDelay() time.Duration {
	if o.ClockDelay > 0 {
		return o.ClockDelay
	}
	return ClockDelay
}

// Run advances every target through rb's steps. Targets that are already
// done cost one observation each.
func Run[F any](ctx context.Context, rb *Runbook[F], targets []Target, o Options) Result {
	if o.Parallel < 1 {
		o.Parallel = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Reporter == nil {
		o.Reporter = nopReporter{}
	}
	res := Result{Runbook: rb.Name, RunID: o.RunID, DryRun: o.DryRun, Outcome: OutcomeDone}
	if o.DryRun {
		res.Outcome = OutcomePlanned
	}
	results := make([]TargetResult, len(targets))
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		halted  bool
		stopWhy string // a pause or a failed health check: start no new target
		inUse   int    // slots of targets in progress, and of stopped targets still out of service
		held    int    // of which: stopped targets still out of service
		acted   int    // targets this run finished by acting (for canary/soak)
		soaked  int    // acted count at the last soak
		wg      sync.WaitGroup
	)
	stopWaiting := context.AfterFunc(ctx, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
	defer stopWaiting()
	o.excl = newExclusion()
	defer context.AfterFunc(ctx, o.excl.wake)()
	inFlight := o.Parallel
	if o.Soak == 0 {
		inFlight += max(o.Prefetch, 0)
	}
	for i, t := range targets {
		mu.Lock()
		for inUse >= inFlight && held < o.Parallel && ctx.Err() == nil && !halted {
			cond.Wait()
		}
		full := held >= o.Parallel
		stop := halted || ctx.Err() != nil
		mu.Unlock()
		if !stop && !full && !o.DryRun && stopWhy == "" {
			stopWhy = soakIfDue(ctx, &o, &wg, &mu, &acted, &soaked)
			if stopWhy == "" && o.Paused != nil {
				if p, why := o.Paused(ctx); p {
					stopWhy = why
				}
			}
			stop = ctx.Err() != nil
		}
		if stop || full || stopWhy != "" {
			results[i] = TargetResult{Target: t.Name(), Outcome: OutcomeSkipped, State: "not started"}
			switch {
			case stop:
			case full:
				results[i].Error = fmt.Sprintf("%d target(s) that stopped are still out of service: the parallel limit is reached", held)
			default:
				results[i].Outcome, results[i].Error = OutcomePaused, stopWhy
			}
			continue
		}
		mu.Lock()
		inUse++
		mu.Unlock()
		wg.Add(1)
		o.excl.started()
		go func() {
			defer wg.Done()
			r := runTarget(ctx, rb, t, o)
			o.excl.finished()
			o.Reporter.TargetDone(r)
			mu.Lock()
			defer mu.Unlock()
			results[i] = r
			if r.holdsSlot {
				held++
			} else {
				inUse--
			}
			if r.Outcome == OutcomeDone && actedOn(r) {
				acted++
			}
			if !o.KeepGoing && (r.Outcome == OutcomeBlocked || r.Outcome == OutcomeFailed) {
				halted = true
			}
			cond.Broadcast()
		}()
	}
	wg.Wait()
	for _, r := range results {
		res.Outcome = Worst(res.Outcome, r.Outcome)
	}
	if res.Outcome == OutcomeSkipped {
		res.Outcome = OutcomeInterrupted
	}
	res.Targets = results
	return res
}

// soakIfDue waits out a soak when one is due before the next target: after
// the first Canary targets (once), or with no canary after every target this
// run acted on. Targets in progress finish first. It returns why the roll
// must stop ("" to go on).
func soakIfDue(ctx context.Context, o *Options, wg *sync.WaitGroup, mu *sync.Mutex, acted, soaked *int) string {
	if o.Soak <= 0 {
		return ""
	}
	due := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if o.Canary > 0 {
			return *soaked < o.Canary && *acted >= o.Canary
		}
		return *acted > *soaked
	}
	if !due() {
		return ""
	}
	wg.Wait() // the nodes in flight are part of what soaks
	mu.Lock()
	*soaked = *acted
	if o.Canary > 0 {
		*soaked = max(*soaked, o.Canary)
	}
	mu.Unlock()
	if o.Health == nil {
		o.Health = func(context.Context) error { return nil }
	}
	if why := Soak(ctx, o.Soak, o.Health, o.Reporter); why != "" {
		if o.OnHealthFailure != nil {
			o.OnHealthFailure(ctx, why)
		}
		return why
	}
	return ""
}

// Soak waits d, checking health along the way, and returns why health
// failed ("" when healthy throughout). Runs that roll one target per Run
// call soak between calls with it.
func Soak(ctx context.Context, d time.Duration, health func(context.Context) error, rep Reporter) string {
	const scope = "soak"
	start := time.Now()
	rep.Step(scope, StepResult{ID: "soak", Title: "Soak: watch the rolled nodes' health", Status: StepWaiting, Started: &start, Budget: d})
	every := min(max(d/10, time.Second), 10*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	failing := false
	for {
		// One failed check may be a node settling (pods coming back); two in
		// a row, or one at the end, stop the roll.
		if err := health(ctx); err != nil {
			if failing {
				why := fmt.Sprintf("health check failed during the soak: %v", err)
				rep.Step(scope, StepResult{ID: "soak", Title: "Soak", Status: StepBlocked, Error: why})
				return why
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-ctx.Done():
			return ""
		case <-end.C:
			if err := health(ctx); err != nil {
				return fmt.Sprintf("health check failed at the end of the soak: %v", err)
			}
			rep.Step(scope, StepResult{ID: "soak", Title: "Soak", Status: StepActed, Evidence: "healthy for " + d.String(),
				Duration: time.Since(start)})
			return ""
		case <-t.C:
		}
	}
}

// actedOn reports whether the run changed something on the target (not
// merely observed it done).
func actedOn(r TargetResult) bool {
	for _, s := range r.Steps {
		if s.Status == StepActed {
			return true
		}
	}
	return false
}

// TimerKey names the annotation holding the start of runbook rb's step in
// progress on a target: "<step-id>@<RFC3339>".
func TimerKey(rb string) string { return "rollbook.dev/" + rb + ".step-started" }

// StepClock reads runbook rb's step clock from a target's annotations: the
// step in progress and when its budget started.
func StepClock(annotations map[string]string, rb string) (stepID string, started time.Time, ok bool) {
	v, found := annotations[TimerKey(rb)]
	if !found {
		return "", time.Time{}, false
	}
	id, at, found := cut(v)
	if !found {
		return "", time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, at)
	return id, t, err == nil
}

// transientRetries is how often a target that failed on a transient API
// error, or found the world changed since its observation (Again), is
// observed afresh and continued before the failure stands.
const transientRetries = 4

// runTarget advances one target. A failure caused by a transient API error
// (a 500, 503, 429, timeout or dropped connection) does not end the target:
// every step is idempotent and decided from fresh observation, so the
// engine observes again after a short backoff and carries on.
func runTarget[F any](ctx context.Context, rb *Runbook[F], t Target, o Options) TargetResult {
	delay := o.RetryBackoff
	if delay <= 0 {
		delay = time.Second
	}
	limit := 8 * delay
	for attempt := 1; ; attempt++ {
		tr := runTargetOnce(ctx, rb, t, o)
		again := IsAgain(tr.cause)
		retryable := again || IsTransient(tr.cause)
		if tr.Outcome != OutcomeFailed || !retryable || attempt > transientRetries || ctx.Err() != nil {
			return tr
		}
		title := "transient API error"
		if again {
			title = "changed since it was observed"
		}
		o.Reporter.Step(t.Name(), StepResult{ID: tr.State, Title: title, Status: StepActing,
			Evidence: fmt.Sprintf("%v; observing again in %s (retry %d of %d)", tr.cause, delay, attempt, transientRetries)})
		select {
		case <-ctx.Done():
			return tr
		case <-time.After(delay):
		}
		delay = min(2*delay, limit)
	}
}

func runTargetOnce[F any](ctx context.Context, rb *Runbook[F], t Target, o Options) TargetResult {
	tr := TargetResult{Target: t.Name(), Outcome: OutcomeDone, State: "done"}
	facts, err := rb.Observe(ctx, t)
	if err != nil {
		tr.Outcome, tr.State, tr.Error, tr.cause = OutcomeFailed, "unknown", fmt.Sprintf("observe: %v", err), err
		return tr
	}
	current := -1 // index of the first step that was not done
	clockStep := ""
	if rb.Annotation != nil && !o.DryRun {
		if v, ok := rb.Annotation(facts, TimerKey(rb.Name)); ok {
			clockStep, _, _ = cut(v)
		}
	}
	// held is the Exclusive step whose exclusion was taken before the last
	// observation (made right after the step before it acted), so that
	// observation serves as the one made inside the exclusion.
	held, heldSeen := -1, 0
	defer func() {
		if held >= 0 {
			o.excl.leave()
		}
	}()
	// staleClock is a finished step whose clock may still be on the
	// target: removed after the next step acts unless that step's own
	// write removed it, and before the target's run ends in any case.
	staleClock := ""
	clearStaleClock := func() error {
		id := staleClock
		staleClock = ""
		if v, ok := rb.Annotation(facts, TimerKey(rb.Name)); !ok || !strings.HasPrefix(v, id+"@") {
			return nil // taken along by the next step's write, or replaced by its own clock
		}
		clear, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return t.SetAnnotation(clear, TimerKey(rb.Name), nil)
	}
	defer func() {
		if staleClock != "" {
			_ = clearStaleClock()
		}
	}()
	covered := AllParts // what the facts in hand were read for
	for i, s := range rb.Steps {
		if held >= 0 && held != i {
			o.excl.leave()
			held = -1
		}
		if s.reads()&^covered != 0 {
			// The step before acted and the one after it was done already:
			// this step decides on parts that observation did not read.
			if facts, err = rb.Observe(ctx, t); err != nil {
				tr.Outcome, tr.State, tr.Error, tr.cause = OutcomeFailed, s.ID, fmt.Sprintf("observe: %v", err), err
				return tr
			}
			covered = AllParts
		}
		sr := StepResult{ID: s.ID, Title: s.Title, Budget: s.Timeout}
		done, ev := s.Done(facts)
		if done && clockStep == s.ID {
			// A clock left by an interrupted run of a step that is done now
			// (finished by that run, or by hand) must not bill a later run.
			if err := t.SetAnnotation(ctx, TimerKey(rb.Name), nil); err != nil {
				tr.Outcome, tr.State, tr.Error, tr.cause = OutcomeFailed, s.ID, fmt.Sprintf("clear step clock: %v", err), err
				return tr
			}
			clockStep = ""
		}
		if done {
			sr.Status, sr.Evidence = StepDone, ev
			tr.Steps = append(tr.Steps, sr)
			o.Reporter.Step(t.Name(), sr)
			continue
		}
		if current < 0 {
			current = i
			tr.State = s.ID
		}
		sr.Evidence = ev
		if o.DryRun {
			sr.Status = StepWouldAct
			if current != i {
				sr.Status = StepPending
			}
			if s.Plan != nil {
				sr.Changes = s.Plan(facts)
			}
			tr.Steps = append(tr.Steps, sr)
			o.Reporter.Step(t.Name(), sr)
			tr.Outcome = OutcomePlanned
			continue
		}
		exclusive := s.Exclusive && o.excl != nil
		if exclusive {
			var reason string
			var err error
			if held == i {
				held = -1 // decideExclusive leaves it, or the act below does
				facts, reason, err = decideExclusive(ctx, rb, s, t, o.excl, facts, heldSeen)
			} else {
				facts, reason, err = enterExclusive(ctx, rb, s, t, o.excl, facts)
			}
			if err != nil {
				tr.Outcome, tr.State, tr.Error, tr.cause = OutcomeFailed, s.ID, fmt.Sprintf("observe: %v", err), err
				return tr
			}
			if reason != "" {
				sr.Status, sr.Error = StepBlocked, reason
				return finish(rb, facts, t, o, tr, sr, i, OutcomeBlocked)
			}
		} else if reason, blocked := firstFailingGuard(s.Guards, facts); blocked {
			sr.Status, sr.Error = StepBlocked, reason
			return finish(rb, facts, t, o, tr, sr, i, OutcomeBlocked)
		}
		wasOut := rb.OutOfService != nil && rb.OutOfService(facts)
		var enterNext func()
		if !exclusive && o.excl != nil && i+1 < len(rb.Steps) && rb.Steps[i+1].Exclusive {
			// The next step decides a shared budget: take its exclusion
			// before observing this step's result, and that observation is
			// the next step's, saving a second one.
			enterNext = func() { heldSeen, held = o.excl.enter(ctx), i+1 }
		}
		parts := s.doneReads()
		if i+1 < len(rb.Steps) {
			parts |= rb.Steps[i+1].reads()
		}
		facts, sr, err = act(ctx, rb, s, t, facts, o, sr, enterNext, parts)
		covered = parts
		if staleClock != "" {
			if cerr := clearStaleClock(); cerr != nil && err == nil {
				err = fmt.Errorf("clear the clock of the step before: %w", cerr)
			}
		}
		if sr.staleClock {
			staleClock = s.ID
		}
		if exclusive {
			o.excl.leave()
		}
		if err == nil && wasOut && !rb.OutOfService(facts) && o.excl != nil {
			// Back in service (uncordoned): a target waiting for the budget
			// need not wait for this one's remaining steps (cleanup).
			o.excl.released()
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
			tr.cause = err
			return finish(rb, facts, t, o, tr, sr, i, outcome)
		}
		tr.Steps = append(tr.Steps, sr)
	}
	if !o.DryRun {
		tr.State = "done"
	}
	return tr
}

// act runs one step: start (or resume) its clock, act, wait, re-observe and
// verify, then stop the clock. beforeObserve, when set, runs just before the
// observation of the result.
func act[F any](ctx context.Context, rb *Runbook[F], s Step[F], t Target, facts F, o Options, sr StepResult,
	beforeObserve func(), parts Parts) (F, StepResult, error) {
	start := o.Now()
	stepCtx := WithStep(ctx, s.ID)
	var clock *stepClock
	if s.Timeout > 0 {
		read := t.Annotation
		if rb.Annotation != nil {
			read = func(_ context.Context, key string) (string, bool, error) {
				v, ok := rb.Annotation(facts, key)
				return v, ok, nil
			}
		}
		started, stored, err := resumeClock(ctx, read, rb.Name, s.ID, o.Now())
		if err != nil {
			return facts, sr, err
		}
		clock = keepClock(ctx, t, rb.Name, s.ID, started, stored, o.clockDelay())
		sr.Started = &started
		deadline := started.Add(s.Timeout)
		var cancel context.CancelFunc
		stepCtx, cancel = context.WithDeadlineCause(stepCtx, deadline,
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
	o.Reporter.Step(t.Name(), sr)
	err := s.Act(stepCtx, facts)
	if err == nil && s.Wait != nil {
		sr.Status = StepWaiting
		o.Reporter.Step(t.Name(), sr)
		err = s.Wait(stepCtx, facts)
	}
	if err != nil {
		if cause := context.Cause(stepCtx); cause != nil && ctx.Err() == nil && !errors.Is(err, cause) {
			// Keep err's chain (a BlockedError must stay blocked).
			err = fmt.Errorf("%v: %w", cause, err)
		}
		sr.Duration = o.Now().Sub(start)
		_ = stopClock(ctx.Err() != nil)
		return facts, sr, err
	}
	if beforeObserve != nil {
		beforeObserve()
	}
	observed, err := observeParts(ctx, rb, t, parts, facts)
	if err != nil {
		_ = stopClock(ctx.Err() != nil)
		return facts, sr, fmt.Errorf("observe after acting: %w", err)
	}
	facts = observed
	done, ev := s.Done(facts)
	sr.Duration = o.Now().Sub(start)
	if !done {
		_ = stopClock(false)
		return facts, sr, fmt.Errorf("acted, but the result is not visible in the cluster: %s", ev)
	}
	if clock != nil && rb.Annotation != nil {
		// Done: the clock goes, but not by a write of its own. The next
		// step's write may take it along (a runbook that records a result
		// removes the clock in the same patch); runTargetOnce removes what
		// is still there once that step has acted.
		if clock.settle() {
			sr.staleClock = true
		}
	} else if err := stopClock(false); err != nil {
		return facts, sr, err
	}
	sr.Status, sr.Evidence = StepActed, ev
	o.Reporter.Step(t.Name(), sr)
	return facts, sr, nil
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

// resumeClock returns when the step's budget started: the time stored on
// the target by an earlier run of the same step (stored), or now.
func resumeClock(ctx context.Context, read func(context.Context, string) (string, bool, error),
	rb, stepID string, now time.Time) (started time.Time, stored bool, err error) {
	v, ok, err := read(ctx, TimerKey(rb))
	if err != nil {
		return now, false, err
	}
	if ok {
		if id, at, found := cut(v); found && id == stepID {
			if started, err := time.Parse(time.RFC3339, at); err == nil {
				return started, true, nil
			}
		}
	}
	return now.Truncate(time.Second), false, nil
}

// ClockDelay is how long a timed step runs before its start is stored on
// the target. Most steps end sooner and never write a clock (two requests
// saved per step); a run killed inside that window re-starts the budget,
// stretching a budget of minutes by at most this much.
const ClockDelay = time.Second

// stepClock stores a running step's start on its target once the step has
// run for the clock delay, so a re-run after an interruption keeps the same
// budget.
type stepClock struct {
	t       Target
	key     string
	stopped chan struct{}
	carried chan bool // whether the target carries the clock, once settled
}

func keepClock(ctx context.Context, t Target, rb, stepID string, started time.Time, stored bool, delay time.Duration) *stepClock {
	c := &stepClock{t: t, key: TimerKey(rb), stopped: make(chan struct{}), carried: make(chan bool, 1)}
	if stored {
		c.carried <- true
		return c
	}
	go func() {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-c.stopped:
			c.carried <- false
		case <-timer.C:
			val := stepID + "@" + started.UTC().Format(time.RFC3339)
			// A failed write leaves the budget undurable, not the step wrong.
			c.carried <- t.SetAnnotation(ctx, c.key, &val) == nil
		}
	}()
	return c
}

// settle stops the clock's timer and reports whether the target carries
// the clock.
func (c *stepClock) settle() bool {
	close(c.stopped)
	return <-c.carried
}

// stop settles the clock and, unless keep, removes it from the target.
func (c *stepClock) stop(ctx context.Context, keep bool) error {
	if carried := c.settle(); !carried || keep {
		return nil
	}
	// The step ended: its clock goes even when the run was cancelled.
	clear, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return c.t.SetAnnotation(clear, c.key, nil)
}

func cut(v string) (id, at string, ok bool) {
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] == '@' {
			return v[:i], v[i+1:], true
		}
	}
	return "", "", false
}

func firstFailingGuard[F any](guards []Guard[F], f F) (string, bool) {
	g, reason := failingGuard(guards, f)
	return reason, g != nil
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

// finish records the step that stopped the target, marks the rest pending
// and attaches the runbook's notes for a person.
func finish[F any](rb *Runbook[F], facts F, t Target, o Options, tr TargetResult, sr StepResult, i int, outcome Outcome) TargetResult {
	tr.Outcome = outcome
	tr.State = sr.ID
	tr.Steps = append(tr.Steps, sr)
	o.Reporter.Step(t.Name(), sr)
	for _, s := range rb.Steps[i+1:] {
		tr.Steps = append(tr.Steps, StepResult{ID: s.ID, Title: s.Title, Status: StepPending})
	}
	if rb.Notes != nil || rb.OutOfService != nil {
		// Say what the run leaves behind as it is now, even after Ctrl-C.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if fresh, err := rb.Observe(ctx, t); err == nil {
			facts = fresh
		}
		if rb.Notes != nil {
			tr.Notes = rb.Notes(facts)
		}
		tr.holdsSlot = rb.OutOfService != nil && rb.OutOfService(facts)
	}
	return tr
}

type nopReporter struct{}

func (nopReporter) Step(string, StepResult) {}
func (nopReporter) TargetDone(TargetResult) {}
