package ateapi

import (
	"context"
	"math/rand/v2"
	"time"
)

// RetryPolicy bounds retries of Aborted (lease or version conflict) and
// Unavailable (port-forward drop, API-server roll, GOAWAY) answers. Every
// call we make is safe to repeat: reads, and Drain/Suspend are idempotent.
type RetryPolicy struct {
	MaxAttempts    int           // total sends, default 5
	InitialBackoff time.Duration // default 200ms, doubled per attempt
	MaxBackoff     time.Duration // default 5s
	// ReconnectWait bounds how long a retry after Unavailable waits for the
	// connection to come back (gRPC wait-for-ready); default 10s.
	ReconnectWait time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = 200 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Second
	}
	if p.ReconnectWait <= 0 {
		p.ReconnectWait = 10 * time.Second
	}
	return p
}

// backoff is the wait before attempt n+1, with ±20% jitter so that
// concurrent suspends do not retry in lockstep.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.InitialBackoff
	for i := 1; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return d + jitter
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
