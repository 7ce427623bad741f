package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Stopping. A helper is asked to stop with SIGTERM (Agent.Stop) when its
// pod is deleted: a drain by another tool (kured, a node-termination
// handler, kubectl drain --disable-eviction), a node shutting down. The
// pod's grace period is the time it gets. What is harmless to cut short
// (a download, a build, a readback) is cut at once; what changes the
// device in a way that is unsafe to cut (tt-flash writing the chips' SPI,
// a reset, the module swap from rmmod to insmod) is a critical section:
// it finishes, and nothing after it starts. The result then says what
// finished and what was skipped (ReasonStopped); a later run carries on
// from what the node reads.

// ReasonStopped says the helper was asked to stop (SIGTERM) and did, after
// finishing the device change in flight.
const ReasonStopped Reason = "Stopped"

// errStopAsked is the cause of an operation's context cancelled by a stop.
var errStopAsked = errors.New("asked to stop (SIGTERM)")

// stopper is one operation's state of a stop.
type stopper struct {
	mu      sync.Mutex
	asked   bool
	held    int      // critical sections running
	ran     []string // critical sections that finished after the stop was asked
	skipped []string // steps not started because of it
	cancel  context.CancelCauseFunc
	// bounded is the operation's context before the stop: its deadline
	// still bounds a critical section.
	bounded context.Context
}

// stoppable arms the agent's Stop for this operation: it returns ctx
// cancelled (cause errStopAsked) once a stop is asked and no critical
// section runs. Steps after that are skipped.
func (x *execution) stoppable(ctx context.Context) context.Context {
	sctx, cancel := context.WithCancelCause(ctx)
	x.stop = &stopper{cancel: cancel, bounded: ctx}
	if x.agent.Stop != nil {
		go func() {
			select {
			case <-x.agent.Stop:
				x.stop.ask()
				x.agent.logf("asked to stop (SIGTERM): finishing what changes the device now, starting nothing more")
			case <-sctx.Done():
			}
		}()
	}
	return sctx
}

func (s *stopper) ask() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = true
	if s.held == 0 {
		s.cancel(errStopAsked)
	}
}

// stopping reports a stop asked while no critical section runs: the next
// step must not start.
func (x *execution) stopping() bool {
	if x.stop == nil {
		return false
	}
	x.stop.mu.Lock()
	defer x.stop.mu.Unlock()
	return x.stop.asked && x.stop.held == 0
}

func (x *execution) stopAsked() bool {
	if x.stop == nil {
		return false
	}
	x.stop.mu.Lock()
	defer x.stop.mu.Unlock()
	return x.stop.asked
}

// critical runs fn, a device change named what, on a context a stop does
// not cancel (the operation's deadline still does): asked to stop while it
// runs, it finishes, and the operation stops after it. Asked before, fn
// does not start.
func (x *execution) critical(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	s := x.stop
	if s == nil {
		return fn(ctx)
	}
	s.mu.Lock()
	if s.asked && s.held == 0 {
		s.skipped = append(s.skipped, what)
		s.mu.Unlock()
		return fail(ReasonStopped, "%v before %s", errStopAsked, what)
	}
	s.held++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.held--
		if s.asked {
			s.ran = append(s.ran, what)
			if s.held == 0 {
				s.cancel(errStopAsked)
			}
		}
	}()
	return fn(s.bounded)
}

// skip records a step not started because of a stop.
func (x *execution) skip(name string) error {
	x.stop.mu.Lock()
	x.stop.skipped = append(x.stop.skipped, name)
	x.stop.mu.Unlock()
	x.res.Steps = append(x.res.Steps, Step{Name: name, Detail: "skipped: asked to stop"})
	return fail(ReasonStopped, "%v before step %s", errStopAsked, name)
}

// stoppedFailure is the verdict of an operation that stopped when asked.
func (x *execution) stoppedFailure() *Failure {
	x.stop.mu.Lock()
	defer x.stop.mu.Unlock()
	msg := "asked to stop (SIGTERM: the helper pod was deleted, e.g. by a drain or a node shutdown)"
	if len(x.stop.ran) > 0 {
		msg += "; finished " + strings.Join(x.stop.ran, ", ") + " first"
	} else {
		msg += "; nothing was changing the device"
	}
	if len(x.stop.skipped) > 0 {
		msg += fmt.Sprintf("; skipped %s", strings.Join(x.stop.skipped, ", "))
	}
	return &Failure{Reason: ReasonStopped, Message: msg + ". Run the same command again to carry on"}
}
