package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"
)

// DefaultHostRoot is where the helper pod mounts the host's /.
const DefaultHostRoot = "/host"

// Agent runs operations against one node. The zero value is not usable:
// set Root at least.
type Agent struct {
	// Root is the host's / as seen by the agent (hostPath / mounted at
	// DefaultHostRoot). Every host file is read and written under it.
	Root string
	// Node is reported in results (the pod's NODE_NAME).
	Node string
	// Env is added to the agent's own environment for every tool it runs
	// (the simulator uses it for FAKEHOST_ROOT).
	Env []string
	// Log receives progress and tool output (the pod log); nil discards.
	Log io.Writer
	// Publish receives a module built here, framed (the pod's stdout).
	Publish io.Writer
	// PollInterval paces refcount polling; 0 means 200ms.
	PollInterval time.Duration
	// Transport carries the agent's downloads; nil is
	// http.DefaultTransport (tests trust a local TLS server with theirs).
	Transport http.RoundTripper
	// Stop, when closed, asks a flash or kmd operation to stop: it
	// finishes the device change in flight and starts nothing more
	// (stop.go). nil: never asked.
	Stop <-chan struct{}
}

func (a *Agent) hostPath(p string) string { return filepath.Join(a.Root, p) }

func (a *Agent) logf(format string, args ...any) {
	if a.Log != nil {
		fmt.Fprintf(a.Log, "node-agent: "+format+"\n", args...)
	}
}

func (a *Agent) pollInterval() time.Duration {
	if a.PollInterval > 0 {
		return a.PollInterval
	}
	return 200 * time.Millisecond
}

// opError is a failure with its reason code and the tool output that
// explains it.
type opError struct {
	reason Reason
	msg    string
	output string
}

func (e *opError) Error() string { return e.msg }

func fail(reason Reason, format string, args ...any) error {
	return &opError{reason: reason, msg: fmt.Sprintf(format, args...)}
}

func failOutput(reason Reason, out toolRun, format string, args ...any) error {
	return &opError{reason: reason, msg: fmt.Sprintf(format, args...), output: out.combined()}
}

// execution accumulates one operation's Result.
type execution struct {
	agent *Agent
	res   Result
	start time.Time
	stop  *stopper // nil: the operation does not stop early
}

func (a *Agent) begin(op Op, target string) *execution {
	now := time.Now()
	a.logf("%s: start (target %s, root %s)", op, target, a.Root)
	return &execution{agent: a, start: now, res: Result{Op: op, Node: a.Node, Target: target, StartedAt: now.UTC()}}
}

// step runs fn as a named step, recording its duration and outcome.
func (x *execution) step(name string, fn func() (detail string, err error)) error {
	if x.stopping() {
		return x.skip(name)
	}
	start := time.Now()
	detail, err := fn()
	s := Step{Name: name, MS: time.Since(start).Milliseconds(), OK: err == nil, Detail: detail}
	if err != nil && detail == "" {
		s.Detail = err.Error()
	}
	x.res.Steps = append(x.res.Steps, s)
	if err != nil {
		x.agent.logf("step %s failed: %v", name, err)
	} else {
		x.agent.logf("step %s ok %s", name, detail)
	}
	return err
}

func (x *execution) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	x.res.Warnings = append(x.res.Warnings, msg)
	x.agent.logf("warning: %s", msg)
}

// finish turns err into the Result's verdict. A context deadline anywhere
// wins, since it is usually the root cause of whatever else went wrong.
func (x *execution) finish(ctx context.Context, err error) Result {
	x.res.DurationMS = time.Since(x.start).Milliseconds()
	if err == nil {
		x.res.Success = true
		x.agent.logf("%s: success (changed=%v)", x.res.Op, x.res.Changed)
		return x.res
	}
	var oe *opError
	switch {
	case x.stopAsked():
		x.res.Error = x.stoppedFailure()
		if errors.As(err, &oe) && oe.reason != ReasonStopped {
			x.res.OutputTail = oe.output
		}
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		msg := "timed out: " + err.Error()
		if errors.As(err, &oe) {
			x.res.OutputTail = oe.output
		}
		x.res.Error = &Failure{Reason: ReasonTimeout, Message: msg}
	case errors.As(err, &oe):
		x.res.Error = &Failure{Reason: oe.reason, Message: oe.msg}
		x.res.OutputTail = oe.output
	default:
		x.res.Error = &Failure{Reason: ReasonHostError, Message: err.Error()}
	}
	x.agent.logf("%s: failed: %s: %s", x.res.Op, x.res.Error.Reason, x.res.Error.Message)
	return x.res
}
