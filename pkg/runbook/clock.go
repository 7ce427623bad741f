package runbook

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/rollbook/rollbook/pkg/paced"
)

// TimerKey names the annotation holding the start of runbook rb's step in
// progress on a target: "<step-id>@<RFC3339>".
func TimerKey(rb string) string { return "rollbook.dev/" + rb + ".step-started" }

// StepsInProgress lists, sorted, the steps whose clock is on annotations
// for runbooks whose name starts with rbPrefix ("tt-" for all of tt's):
// a target with one is half-way through that step.
func StepsInProgress(annotations map[string]string, rbPrefix string) []string {
	var steps []string
	for k, v := range annotations {
		rb, ok := strings.CutPrefix(k, "rollbook.dev/")
		if !ok || !strings.HasPrefix(rb, rbPrefix) || !strings.HasSuffix(rb, ".step-started") {
			continue
		}
		id, _, _ := strings.Cut(v, "@")
		steps = append(steps, id)
	}
	slices.Sort(steps)
	return steps
}

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

// ClockDelay is how long a timed step runs before its start is stored on
// the target. Most steps end sooner and never write a clock (two requests
// saved per step); a run killed inside that window re-starts the budget,
// stretching a budget of minutes by at most this much.
const ClockDelay = time.Second

// clockReader reads the step clock from the observed facts when the runbook
// can, saving a read; from the target otherwise.
func (r *targetRun[F]) clockReader() func(context.Context, string) (string, bool, error) {
	if r.rb.Annotation == nil {
		return r.t.Annotation
	}
	return func(_ context.Context, key string) (string, bool, error) {
		v, ok := r.rb.Annotation(r.facts, key)
		return v, ok, nil
	}
}

// clearStaleClock removes the clock of the finished step r.staleClock unless
// the next step's write took it along or replaced it with its own.
func (r *targetRun[F]) clearStaleClock(ctx context.Context) error {
	id := r.staleClock
	r.staleClock = ""
	if v, ok := r.rb.Annotation(r.facts, TimerKey(r.rb.Name)); !ok || !strings.HasPrefix(v, id+"@") {
		return nil
	}
	clear, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return r.t.SetAnnotation(paced.Mark(clear), TimerKey(r.rb.Name), nil)
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
			c.carried <- t.SetAnnotation(paced.Mark(ctx), c.key, &val) == nil
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
	return c.t.SetAnnotation(paced.Mark(clear), c.key, nil)
}

func cut(v string) (id, at string, ok bool) {
	i := strings.LastIndexByte(v, '@')
	if i < 0 {
		return "", "", false
	}
	return v[:i], v[i+1:], true
}
