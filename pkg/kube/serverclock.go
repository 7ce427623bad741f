package kube

import (
	"net/http"
	"sync"
	"time"
)

// ServerClock is the API server's clock, as its responses tell it.
// Timestamps rollbook compares with "now" were written by the API server (a pod's
// creationTimestamp) or by runs on other machines (a step's start, a
// cordon's time, a campaign's start): compared with this machine's wall
// clock, a laptop a few minutes off would cut a step's budget short, keep
// a stuck helper for ever, or re-flash a node it should skip. So every
// such time is written and judged on the API server's clock, estimated
// here from the Date header of every response (RFC 7231: the second at
// which the server made it).
//
// Each response bounds the offset (server minus local) by its send and
// receive times: the server's clock read Date, to the second, at some
// moment between them. The bounds of successive responses are
// intersected, so the estimate tightens to about one round trip; bounds
// that no longer meet (a clock was stepped) start it afresh.
type ServerClock struct {
	mu     sync.Mutex
	known  bool
	lo, hi time.Duration
	// local is this machine's wall clock (tests move it).
	local func() time.Time
}

// Server is the clock of the API server this process talks to; every
// client of the plugins feeds it (ObserveServerClock).
var Server = &ServerClock{}

// ServerNow is Server.Now.
func ServerNow() time.Time { return Server.Now() }

func (c *ServerClock) localNow() time.Time {
	if c.local != nil {
		return c.local()
	}
	return time.Now()
}

// Observe records one response's Date, which the server stamped between
// sent and received (this machine's wall clock).
func (c *ServerClock) Observe(sent, received, date time.Time) {
	if date.IsZero() || received.Before(sent) {
		return
	}
	lo := date.Sub(received.Round(0))
	hi := date.Add(time.Second).Sub(sent.Round(0))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known || lo > c.hi || hi < c.lo {
		c.known, c.lo, c.hi = true, lo, hi
		return
	}
	c.lo, c.hi = max(c.lo, lo), min(c.hi, hi)
}

// Offset is the server's clock minus this machine's, and whether any
// response told it yet.
func (c *ServerClock) Offset() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known {
		return 0, false
	}
	return (c.lo + c.hi) / 2, true
}

// Now is the API server's time now: this machine's, until a response
// told the offset. It keeps Go's monotonic reading, so durations between
// two Nows stay right across a wall-clock step.
func (c *ServerClock) Now() time.Time {
	off, _ := c.Offset()
	return c.localNow().Add(off)
}

// ObserveServerClock wraps a client's transport so that every response
// feeds Server.
func ObserveServerClock(rt http.RoundTripper) http.RoundTripper {
	return serverClockRT{rt: rt, clock: Server}
}

type serverClockRT struct {
	rt    http.RoundTripper
	clock *ServerClock
}

func (t serverClockRT) RoundTrip(r *http.Request) (*http.Response, error) {
	sent := t.clock.localNow()
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	// A watch's headers come when it starts; Date is still the server's
	// time then.
	if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
		t.clock.Observe(sent, t.clock.localNow(), d)
	}
	return resp, nil
}
