package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RunState is what a roll's Lease says of the run on it: who holds it, how
// far that run is, its pause, and how the last run ended.
type RunState struct {
	Held     bool
	Holder   lease.Holder
	Expired  bool // held, but not renewed within its duration: the holder died
	Progress RunProgress
	Pause    *lease.Pause
}

// RunStateOf reads l (nil: no run ever took it).
func RunStateOf(l *coordv1.Lease, now time.Time) RunState {
	var st RunState
	if l == nil {
		return st
	}
	rec := lease.RecordOf(l)
	st.Held, st.Holder, st.Pause = rec.Identity != "", rec.Holder, lease.PauseOf(l)
	if v := l.Annotations[AnnProgress]; v != "" {
		_ = json.Unmarshal([]byte(v), &st.Progress) // unreadable: no progress shown
	}
	if st.Held && l.Spec.RenewTime != nil && rec.Duration > 0 {
		// Twice the duration: a renewal late by a slow API server is not a death.
		st.Expired = now.After(l.Spec.RenewTime.Add(2 * rec.Duration))
	}
	return st
}

// line is how --wait prints the state: one line per change.
func (st RunState) line(plugin string) string {
	p := st.Progress
	count := fmt.Sprintf("%d done", p.Done)
	if p.Total > 0 {
		count = fmt.Sprintf("%d of %d done", p.Done, p.Total)
	}
	if p.Failed > 0 {
		count += fmt.Sprintf(", %d stopped", p.Failed)
	}
	var s string
	switch {
	case st.Held && st.Expired:
		s = fmt.Sprintf("run %s (%s on %s) stopped renewing the lock: %s", st.Holder.RunID, st.Holder.User, st.Holder.Host, count)
	case st.Held:
		s = fmt.Sprintf("run %s (%s on %s): %s", st.Holder.RunID, st.Holder.User, st.Holder.Host, count)
		if p.Run == st.Holder.RunID {
			if eta, ok := EstimateETA(p, nil); ok && eta.Left > 0 {
				s += " · ETA " + shortDuration(eta.Left)
			}
		}
	case p.Outcome != "":
		s = fmt.Sprintf("run %s ended %s: %s", p.Run, p.Outcome, count)
	case p.Run != "":
		s = fmt.Sprintf("run %s stopped: %s", p.Run, count)
	default:
		s = "no run has taken the lock"
	}
	if st.Pause != nil {
		s += fmt.Sprintf("; PAUSED: %s — `kubectl %s resume` lifts it", st.Pause, plugin)
	}
	return s
}

// verdict is, once no live run holds the Lease, the exit of --wait: 0 the
// last run finished, 3 it stopped for a person (blocked, or paused), 1 it
// failed, was interrupted or died. done is false while a run is on.
func (st RunState) verdict(plugin string) (done bool, err error) {
	if st.Held && !st.Expired {
		return false, nil
	}
	p := st.Progress
	switch {
	case st.Held:
		return true, WithExitCode(ExitFailed, fmt.Errorf("run %s stopped renewing the lock (killed, or its host is gone); re-run its "+
			"command to continue where it stopped", st.Holder.RunID))
	case st.Pause != nil:
		return true, WithExitCode(ExitBlocked, fmt.Errorf("the roll is paused (%s); `kubectl %s resume`, then re-run its command", st.Pause,
			plugin))
	}
	switch p.Outcome {
	case runbook.OutcomeDone, runbook.OutcomePlanned, "":
		if p.Outcome == "" && p.Run != "" && p.Done+p.Failed < p.Total {
			return true, WithExitCode(ExitFailed, fmt.Errorf("run %s stopped with %d of %d done; re-run its command", p.Run, p.Done,
				p.Total))
		}
		return true, nil
	case runbook.OutcomeBlocked, runbook.OutcomePaused:
		return true, WithExitCode(ExitBlocked, fmt.Errorf("run %s ended %s: a person must resolve it (`kubectl %s status` says what); "+
			"then re-run its command", p.Run, p.Outcome, plugin))
	default:
		return true, WithExitCode(ExitFailed, fmt.Errorf("run %s ended %s (`kubectl %s history` lists what it did); re-run its command "+
			"after fixing the cause", p.Run, p.Outcome, plugin))
	}
}

// WaitForRun waits until no live run holds the Lease ns/name and exits as
// the last run ended (RunState.verdict), printing to out each change of
// the run's state as it happens. It watches the one Lease: no request per
// change of anything else. timeout 0 waits as long as ctx allows.
func WaitForRun(ctx context.Context, cs kubernetes.Interface, out io.Writer, plugin, ns, name string, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := ""
	check := func(l *coordv1.Lease) (bool, error) {
		st := RunStateOf(l, time.Now())
		if line := st.line(plugin); line != last {
			fmt.Fprintf(out, "%s %s\n", time.Now().UTC().Format("15:04:05"), line)
			last = line
		}
		return st.verdict(plugin)
	}
	for {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = nil
		case err != nil:
			return waitErr(ctx, timeout, err)
		}
		if done, err := check(l); done {
			return err
		}
		rv := ""
		if l != nil {
			rv = l.ResourceVersion
		}
		w, err := cs.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			return waitErr(ctx, timeout, err)
		}
		done, err := watchLease(ctx, w, l, check)
		w.Stop()
		if done {
			return err
		}
		if ctx.Err() != nil {
			return waitErr(ctx, timeout, ctx.Err())
		}
		// The watch ended (expired, or the server closed it): read afresh.
	}
}

// watchLease feeds each change of the Lease to check, and checks again as
// the holder's renewal falls due: a holder that died writes nothing more.
func watchLease(ctx context.Context, w watch.Interface, l *coordv1.Lease, check func(*coordv1.Lease) (bool, error)) (bool, error) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-tick.C:
			if done, err := check(l); done {
				return true, err
			}
		case e, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch e.Type {
			case watch.Added, watch.Modified:
				if nl, ok := e.Object.(*coordv1.Lease); ok {
					l = nl
				}
			case watch.Deleted:
				l = nil
			case watch.Error:
				return false, nil
			default:
				continue
			}
			if done, err := check(l); done {
				return true, err
			}
		}
	}
}

func waitErr(ctx context.Context, timeout time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && timeout > 0 {
		return WithExitCode(ExitFailed, fmt.Errorf("timed out after %s waiting for the run to end", timeout))
	}
	return err
}
