package runbook

import (
	"context"
	"fmt"
	"iter"
	"slices"
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
	// by default the run halts: targets out of service finish their step,
	// and one not yet out of service (prefetched) stops, skipped, at its
	// Exclusive step, also one waiting there for a budget.
	KeepGoing bool
	// MaxFailures, when above 0, is the run's failure budget: once that
	// many targets failed or blocked, no other starts (those in progress
	// finish). It overrides KeepGoing: 1 halts at the first failure.
	MaxFailures int
	Reporter    Reporter
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

func (o *Options) defaults() {
	o.Parallel = max(o.Parallel, 1)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Reporter == nil {
		o.Reporter = nopReporter{}
	}
}

// Run advances every target through rb's steps. Targets that are already
// done cost one observation each; targets the run did not start (it halted,
// was paused, or the parallel limit is held by stopped targets) are reported
// with why.
func Run[F any](ctx context.Context, rb *Runbook[F], targets []Target, o Options) Result {
	res := RunSource(ctx, rb, slices.Values(targets), o)
	for _, t := range targets[len(res.Targets):] {
		r := TargetResult{Target: t.Name(), Ref: t.Ref(), Outcome: OutcomeSkipped, State: "not started", Error: res.Stopped}
		if res.stoppedBy == OutcomePaused {
			r.Outcome = OutcomePaused
		}
		res.Targets = append(res.Targets, r)
	}
	res.Outcome = outcomeOf(res)
	return res
}

// RunSource advances the targets src yields through rb's steps. The next
// target is asked for only once it may start — a slot is free, a soak that
// was due passed, the roll is not paused — so a source may decide each
// target from the cluster as it stands then (the ate roll picks the next
// node after the last one moved). A run that stops early asks for no more
// and says why in Result.Stopped.
func RunSource[F any](ctx context.Context, rb *Runbook[F], src iter.Seq[Target], o Options) Result {
	o.defaults()
	s := newSchedule(ctx, o)
	defer s.close()
	next, stop := iter.Pull(src)
	defer stop()
	var results []*TargetResult
	for {
		if why, by := s.waitForSlot(ctx); by != "" {
			s.stop(why, by)
			break
		}
		t, ok := next()
		if !ok {
			break
		}
		r := &TargetResult{Target: t.Name(), Ref: t.Ref()}
		results = append(results, r)
		if why, by := s.gate(ctx); by != "" {
			r.Outcome, r.State, r.Error = by, "not started", why
			s.stop(why, by)
			break
		}
		s.start(func() TargetResult {
			return runTarget(ctx, rb, t, o, s.excl)
		}, r)
	}
	s.wg.Wait()
	res := Result{Runbook: rb.Name, RunID: o.RunID, DryRun: o.DryRun, Stopped: s.why, stoppedBy: s.by}
	for _, r := range results {
		res.Targets = append(res.Targets, *r)
	}
	res.Outcome = outcomeOf(res)
	return res
}

func outcomeOf(res Result) Outcome {
	out := OutcomeDone
	if res.DryRun {
		out = OutcomePlanned
	}
	for _, r := range res.Targets {
		out = Worst(out, r.Outcome)
	}
	if out == OutcomeSkipped {
		out = OutcomeInterrupted
	}
	return out
}

// schedule hands out a run's parallel slots and decides, before each new
// target, whether the run may start one.
type schedule struct {
	o    Options
	excl *exclusion
	wg   sync.WaitGroup
	mu   sync.Mutex
	cond *sync.Cond
	// halted: a target failed or blocked (without KeepGoing).
	halted bool
	// inUse counts slots of targets in progress and of stopped targets
	// still out of service; held counts the latter.
	inUse, held int
	// acted counts targets this run finished by acting; soaked the count
	// at the last soak.
	acted, soaked int
	inFlight      int
	failures      int
	why           string  // why the run stopped starting targets
	by            Outcome // and the outcome that stop gives (skipped or paused)
	unwatch       func() bool
	unwake        func() bool
}

func newSchedule(ctx context.Context, o Options) *schedule {
	s := &schedule{o: o, excl: newExclusion(), inFlight: o.Parallel}
	s.cond = sync.NewCond(&s.mu)
	if o.Soak == 0 {
		s.inFlight += max(o.Prefetch, 0)
	}
	s.unwatch = context.AfterFunc(ctx, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	s.unwake = context.AfterFunc(ctx, s.excl.wake)
	return s
}

func (s *schedule) close() { s.unwatch(); s.unwake() }

func (s *schedule) stop(why string, by Outcome) { s.why, s.by = why, by }

// waitForSlot waits for a free slot. It returns why no target may start
// ("" and "" when one may).
func (s *schedule) waitForSlot(ctx context.Context) (string, Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.inUse >= s.inFlight && s.held < s.o.Parallel && ctx.Err() == nil && !s.halted {
		s.cond.Wait()
	}
	switch {
	case s.halted && s.o.MaxFailures > 0:
		return fmt.Sprintf("%d target(s) failed: the failure budget of %d is spent", s.failures, s.o.MaxFailures), OutcomeSkipped
	case s.halted || ctx.Err() != nil:
		return "", OutcomeSkipped
	case s.held >= s.o.Parallel:
		return fmt.Sprintf("%d target(s) that stopped are still out of service: the parallel limit is reached", s.held),
			OutcomeSkipped
	}
	return "", ""
}

// gate soaks if a soak is due before the next target and asks whether the
// roll is paused; it returns why that target may not start.
func (s *schedule) gate(ctx context.Context) (string, Outcome) {
	if s.o.DryRun {
		return "", ""
	}
	if why := s.soakIfDue(ctx); why != "" {
		return why, OutcomePaused
	}
	if s.o.Paused != nil {
		if p, why := s.o.Paused(ctx); p {
			return why, OutcomePaused
		}
	}
	if ctx.Err() != nil {
		return "", OutcomeSkipped
	}
	return "", ""
}

// start runs one target in a slot of its own and stores its result in r.
func (s *schedule) start(run func() TargetResult, r *TargetResult) {
	s.mu.Lock()
	s.inUse++
	s.mu.Unlock()
	s.wg.Add(1)
	s.excl.started()
	go func() {
		defer s.wg.Done()
		res := run()
		// The halt is known before the end is: a target waiting for the
		// budget this end frees must stop, not take it.
		if why := s.count(res); why != "" {
			s.excl.halt(why)
		}
		s.excl.finished(res.Target)
		s.o.Reporter.TargetDone(res)
		s.mu.Lock()
		defer s.mu.Unlock()
		*r = res
		if res.holdsSlot {
			s.held++
		} else {
			s.inUse--
		}
		if res.Outcome == OutcomeDone && actedOn(res) {
			s.acted++
		}
		s.cond.Broadcast()
	}()
}

// count counts a stopped target against the failure budget and returns
// why the run halts when it does.
func (s *schedule) count(res TargetResult) string {
	if res.Outcome != OutcomeBlocked && res.Outcome != OutcomeFailed {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures++
	switch {
	case s.o.MaxFailures > 0 && s.failures >= s.o.MaxFailures:
		s.halted = true
		return fmt.Sprintf("%d target(s) failed: the failure budget of %d is spent", s.failures, s.o.MaxFailures)
	case s.o.MaxFailures <= 0 && !s.o.KeepGoing:
		s.halted = true
		return fmt.Sprintf("%s %s", res.Target, res.Outcome)
	}
	return ""
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

type nopReporter struct{}

func (nopReporter) Step(string, StepResult) {}
func (nopReporter) TargetDone(TargetResult) {}
