package runbook

import (
	"context"
	"fmt"
	"time"
)

// soakIfDue waits out a soak when one is due before the next target: after
// the first Canary targets (once), or with no canary after every target this
// run acted on. Targets in progress finish first. It returns why the roll
// must stop ("" to go on).
func (s *schedule) soakIfDue(ctx context.Context) string {
	o := s.o
	if o.Soak <= 0 {
		return ""
	}
	s.mu.Lock()
	due := s.acted > s.soaked
	if o.Canary > 0 {
		due = s.soaked < o.Canary && s.acted >= o.Canary
	}
	s.mu.Unlock()
	if !due {
		return ""
	}
	s.wg.Wait() // the targets in flight are part of what soaks
	s.mu.Lock()
	s.soaked = max(s.acted, o.Canary)
	s.mu.Unlock()
	health := o.Health
	if health == nil {
		health = func(context.Context) error { return nil }
	}
	if why := Soak(ctx, o.Soak, health, o.Reporter); why != "" {
		if o.OnHealthFailure != nil {
			o.OnHealthFailure(ctx, why)
		}
		return why
	}
	return ""
}

// Soak waits d, checking health along the way, and returns why health
// failed ("" when healthy throughout).
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
