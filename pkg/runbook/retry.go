package runbook

import (
	"context"
	"fmt"
	"time"
)

// transientRetries is how often a target that failed on a transient API
// error, or found the world changed since its observation (Again), is
// observed afresh and continued before the failure stands.
const transientRetries = 4

// runTarget advances one target. A failure caused by a transient API error
// (a 500, 503, 429, timeout or dropped connection) does not end the target:
// every step is idempotent and decided from fresh observation, so the
// engine observes again after a short backoff and carries on.
func runTarget[F any](ctx context.Context, rb *Runbook[F], t Target, o Options, excl *exclusion) TargetResult {
	delay := o.RetryBackoff
	if delay <= 0 {
		delay = time.Second
	}
	limit := 8 * delay
	for attempt := 1; ; attempt++ {
		tr := runTargetOnce(ctx, rb, t, o, excl)
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
