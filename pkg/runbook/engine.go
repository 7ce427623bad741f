package runbook

import (
	"context"
	"errors"
	"fmt"
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
	// KeepGoing continues with other targets after one is blocked or fails;
	// by default the run halts (targets in progress finish their step).
	KeepGoing bool
	Reporter  Reporter
	// Paused, when set, is asked before each target starts; a paused roll
	// starts no new target (targets in progress finish) and ends "paused".
	Paused func(ctx context.Context) (paused bool, why string)
	// Now is the clock; tests may fix it.
	Now func() time.Time
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
		mu        sync.Mutex
		halted    bool
		pausedWhy string
		wg        sync.WaitGroup
	)
	slots := make(chan struct{}, o.Parallel)
	for i, t := range targets {
		got := false
		select {
		case slots <- struct{}{}:
			got = true
		case <-ctx.Done():
		}
		mu.Lock()
		stop := halted || ctx.Err() != nil
		mu.Unlock()
		if !stop && !o.DryRun && o.Paused != nil && pausedWhy == "" {
			if p, why := o.Paused(ctx); p {
				pausedWhy = why
			}
		}
		if stop || pausedWhy != "" {
			if got {
				<-slots
			}
			results[i] = TargetResult{Target: t.Name(), Outcome: OutcomeSkipped, State: "not started"}
			if pausedWhy != "" && !stop {
				results[i].Outcome, results[i].Error = OutcomePaused, pausedWhy
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			r := runTarget(ctx, rb, t, o)
			o.Reporter.TargetDone(r)
			mu.Lock()
			results[i] = r
			if !o.KeepGoing && (r.Outcome == OutcomeBlocked || r.Outcome == OutcomeFailed) {
				halted = true
			}
			mu.Unlock()
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

func runTarget[F any](ctx context.Context, rb *Runbook[F], t Target, o Options) TargetResult {
	tr := TargetResult{Target: t.Name(), Outcome: OutcomeDone, State: "done"}
	facts, err := rb.Observe(ctx, t)
	if err != nil {
		tr.Outcome, tr.State, tr.Error = OutcomeFailed, "unknown", fmt.Sprintf("observe: %v", err)
		return tr
	}
	current := -1 // index of the first step that was not done
	clockStep := ""
	if rb.Annotation != nil && !o.DryRun {
		if v, ok := rb.Annotation(facts, TimerKey(rb.Name)); ok {
			clockStep, _, _ = cut(v)
		}
	}
	for i, s := range rb.Steps {
		sr := StepResult{ID: s.ID, Title: s.Title, Budget: s.Timeout}
		done, ev := s.Done(facts)
		if done && clockStep == s.ID {
			// A clock left by an interrupted run of a step that is done now
			// (finished by that run, or by hand) must not bill a later run.
			if err := t.SetAnnotation(ctx, TimerKey(rb.Name), nil); err != nil {
				tr.Outcome, tr.State, tr.Error = OutcomeFailed, s.ID, fmt.Sprintf("clear step clock: %v", err)
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
		if reason, blocked := firstFailingGuard(s.Guards, facts); blocked {
			sr.Status, sr.Error = StepBlocked, reason
			return finish(rb, facts, t, o, tr, sr, i, OutcomeBlocked)
		}
		facts, sr, err = act(ctx, rb, s, t, facts, o, sr)
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
			if outcome != OutcomeInterrupted && s.Timeout > 0 {
				// The step ended (blocked or failed, and said so): the re-run
				// after a fix gets a fresh budget. Only an interrupted step
				// keeps its clock.
				clear, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = t.SetAnnotation(clear, TimerKey(rb.Name), nil)
				cancel()
			}
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
// verify, then stop the clock.
func act[F any](ctx context.Context, rb *Runbook[F], s Step[F], t Target, facts F, o Options, sr StepResult) (F, StepResult, error) {
	start := o.Now()
	stepCtx := ctx
	if s.Timeout > 0 {
		read := t.Annotation
		if rb.Annotation != nil {
			read = func(_ context.Context, key string) (string, bool, error) {
				v, ok := rb.Annotation(facts, key)
				return v, ok, nil
			}
		}
		started, err := startClock(ctx, t, read, rb.Name, s.ID, o.Now())
		if err != nil {
			return facts, sr, err
		}
		sr.Started = &started
		deadline := started.Add(s.Timeout)
		var cancel context.CancelFunc
		stepCtx, cancel = context.WithDeadlineCause(ctx, deadline,
			fmt.Errorf("step %q ran out of its %s budget (started %s)", s.Title, s.Timeout, started.Format(time.RFC3339)))
		defer cancel()
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
		return facts, sr, err
	}
	observed, err := rb.Observe(ctx, t)
	if err != nil {
		return facts, sr, fmt.Errorf("observe after acting: %w", err)
	}
	facts = observed
	done, ev := s.Done(facts)
	sr.Duration = o.Now().Sub(start)
	if !done {
		return facts, sr, fmt.Errorf("acted, but the result is not visible in the cluster: %s", ev)
	}
	if s.Timeout > 0 {
		if err := t.SetAnnotation(ctx, TimerKey(rb.Name), nil); err != nil {
			return facts, sr, err
		}
	}
	sr.Status, sr.Evidence = StepActed, ev
	o.Reporter.Step(t.Name(), sr)
	return facts, sr, nil
}

// startClock returns when the step's budget started: the time stored on the
// target by an earlier run of the same step, or now (which it stores).
func startClock(ctx context.Context, t Target, read func(context.Context, string) (string, bool, error), rb, stepID string, now time.Time) (time.Time, error) {
	key := TimerKey(rb)
	v, ok, err := read(ctx, key)
	if err != nil {
		return now, err
	}
	if ok {
		if id, at, found := cut(v); found && id == stepID {
			if started, err := time.Parse(time.RFC3339, at); err == nil {
				return started, nil
			}
		}
	}
	val := stepID + "@" + now.UTC().Format(time.RFC3339)
	return now.Truncate(time.Second), t.SetAnnotation(ctx, key, &val)
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
	for _, g := range guards {
		if ok, reason := g.Check(f); !ok {
			return fmt.Sprintf("%s: %s", g.Name, reason), true
		}
	}
	return "", false
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
	if rb.Notes != nil {
		// Say what the run leaves behind as it is now, even after Ctrl-C.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if fresh, err := rb.Observe(ctx, t); err == nil {
			facts = fresh
		}
		tr.Notes = rb.Notes(facts)
	}
	return tr
}

type nopReporter struct{}

func (nopReporter) Step(string, StepResult) {}
func (nopReporter) TargetDone(TargetResult) {}
