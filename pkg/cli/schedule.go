package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/notify"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
	"github.com/rollbook/rollbook/pkg/window"
)

// windowValue is --window, parsed as it is set: a bad window is a flag
// error (exit 2) before anything reads the cluster.
type windowValue struct{ w **window.Window }

func (v windowValue) String() string {
	if *v.w == nil {
		return ""
	}
	return (*v.w).String()
}

func (v windowValue) Set(s string) error {
	w, err := window.Parse(s)
	if err != nil {
		return err
	}
	*v.w = w
	return nil
}

func (windowValue) Type() string { return "window" }

// stopAtValue is --stop-at, resolved to an absolute time as it is set:
// passed on (an in-cluster Job's arguments) it means the same moment.
type stopAtValue struct{ t *time.Time }

func (v stopAtValue) String() string {
	if v.t.IsZero() {
		return ""
	}
	return v.t.Format(time.RFC3339)
}

func (v stopAtValue) Set(s string) error {
	t, err := window.ParseStopAt(s, time.Now())
	if err != nil {
		return err
	}
	*v.t = t
	return nil
}

func (stopAtValue) Type() string { return "time" }

// addScheduleFlags registers --window and --stop-at on f.
func (f *SoakFlags) addScheduleFlags(fs *pflag.FlagSet) {
	fs.Var(windowValue{&f.Window}, "window", "start nodes only inside this maintenance window, "+
		"'[DAYS] HH:MM-HH:MM ZONE' such as 'Mon-Fri 01:00-05:00 Europe/Berlin' (an end before the start crosses "+
		"midnight). A node in progress at its end finishes; then the run stops \"paused\" and says when the next "+
		"window opens. Re-run the same command then")
	fs.Var(stopAtValue{&f.StopAt}, "stop-at", "start no node after this time, RFC 3339 (2026-03-01T06:00:00+01:00) "+
		"or a duration from now (4h); a node in progress finishes, then the run stops \"paused\"")
	fs.BoolVar(&f.WaitForWindow, "wait-for-window", false, "while the --window is closed, wait for it to open (holding "+
		"the roll's lock) and go on, instead of ending \"paused\"; --stop-at still ends the run. An --in-cluster run "+
		"waits unless this is set to false")
}

// Schedule is the roll's --window and --stop-at.
func (f SoakFlags) Schedule() window.Schedule {
	return window.Schedule{Window: f.Window, StopAt: f.StopAt}
}

// scheduleClock is the clock windows are judged by: the API server's,
// as for step budgets, so a run in a Job and one on a laptop agree.
var scheduleClock = kube.ServerNow

// ScheduleOf is the --window and --stop-at of a command's flags (none
// when it has no such flags).
func ScheduleOf(fs *pflag.FlagSet) window.Schedule {
	var sched window.Schedule
	if f := fs.Lookup("window"); f != nil {
		if v, ok := f.Value.(windowValue); ok {
			sched.Window = *v.w
		}
	}
	if f := fs.Lookup("stop-at"); f != nil {
		if v, ok := f.Value.(stopAtValue); ok {
			sched.StopAt = *v.t
		}
	}
	return sched
}

// OutsideSchedule says whether the command's --window or --stop-at keep
// the run from starting any node now. If so it has said why and when to
// re-run, on the command's output (as JSON or YAML for -o), and the
// command ends there with exit 0 as a paused roll does: no lock, no
// journal, no node touched. A dry run only notes it and plans.
func OutsideSchedule(fs *pflag.FlagSet, g *Globals, plugin string) bool {
	now := scheduleClock()
	v := ScheduleOf(fs).At(now)
	if wait, _ := fs.GetBool("wait-for-window"); v.Open || wait && !v.Next.IsZero() {
		return false // a run that waits starts, and waits before its first node
	}
	why := scheduleStop(v, now, plugin)
	if f := fs.Lookup("dry-run"); f != nil && f.Value.String() == "client" {
		fmt.Fprintf(g.IOStreams.ErrOut, "note: %s\n", why)
		return false
	}
	if output, _ := fs.GetString("output"); output != "" {
		fmt.Fprintf(g.IOStreams.ErrOut, "%s\n", why)
		_ = ui.PrintObject(g.IOStreams.Out, output, runbook.Result{Outcome: runbook.OutcomePaused, Stopped: why})
		return true
	}
	fmt.Fprintf(g.IOStreams.Out, "paused before starting: %s\n", why)
	return true
}

// The session's schedule state: scheduleWhy says, once the window closed
// (or --stop-at passed), when to re-run and how (scheduleNote says it
// once); waiting is the opening a --wait-for-window run last said it
// waits for.

// applySchedule makes o's pause check also close at the schedule's end,
// as `kubectl <plugin> pause` would: nodes in progress finish, no other
// starts, and the run ends "paused" saying when to re-run.
//
// With wait, a closed window is waited out instead (a Lease pause and the
// context still end the wait, checked every scheduleRecheck); only
// --stop-at ends the run.
func (s *Session) applySchedule(o *runbook.Options, sched window.Schedule, wait bool) {
	if sched.Window == nil && sched.StopAt.IsZero() {
		return
	}
	now := scheduleClock()
	if until := sched.Until(now); until != "" && !s.DryRun() {
		s.Progress.Printf("%s", until)
	}
	paused := o.Paused
	if paused == nil {
		paused = s.Paused
	}
	o.Paused = func(ctx context.Context) (bool, string) {
		if p, why := paused(ctx); p {
			return p, why
		}
		now := scheduleClock()
		v := sched.At(now)
		waited := false
		for wait && !v.Open && !v.Next.IsZero() && ctx.Err() == nil {
			if !s.waiting.Equal(v.Next) {
				s.waiting = v.Next
				msg := fmt.Sprintf("%s: waiting until it opens %s", v.Reason, window.When(v.Next, now, v.Next.Location()))
				s.Progress.Printf("%s", msg)
				s.notify(notify.Event{Kind: notify.Paused, Reason: msg, Text: s.who() + ": paused, " + msg})
			}
			waited = true
			select {
			case <-ctx.Done():
				return false, "" // the engine sees the context
			case <-time.After(min(v.Next.Sub(now), scheduleRecheck)):
			}
			if p, why := paused(ctx); p {
				return p, why
			}
			now = scheduleClock()
			v = sched.At(now)
		}
		if v.Open {
			if waited {
				s.notify(notify.Event{Kind: notify.Resumed, Text: fmt.Sprintf("%s: the window %q opened; the roll goes on",
					s.who(), sched.Window.String())})
			}
			return false, ""
		}
		s.scheduleNote.Do(func() {
			s.scheduleWhy = scheduleStop(v, now, s.plugin)
			s.Progress.Printf("paused: %s", s.scheduleWhy)
			s.note(ctx, "Paused", s.scheduleWhy)
		})
		if !v.Next.IsZero() {
			return true, fmt.Sprintf("%s; it opens %s", v.Reason, window.When(v.Next, now, v.Next.Location()))
		}
		return true, v.Reason
	}
}

// scheduleRecheck is how often a run waiting for its window checks for a
// pause: a person's pause stops a waiting roll within it.
const scheduleRecheck = time.Minute

// scheduleStop says why the schedule starts no node now, when it next may
// and the command to run then.
func scheduleStop(v window.Verdict, now time.Time, plugin string) string {
	switch {
	case !v.Next.IsZero():
		return fmt.Sprintf("%s; it opens %s: re-run then: %s", v.Reason, window.When(v.Next, now, v.Next.Location()),
			ResumeCommand(plugin, commandArgs(), false))
	case strings.HasPrefix(v.Reason, "--stop-at"):
		return fmt.Sprintf("%s; to go on, re-run without it (or with a later one): %s", v.Reason,
			ResumeCommand(plugin, commandArgs(), true))
	default:
		return fmt.Sprintf("%s and it does not open again before --stop-at; re-run with a later --stop-at or none: %s",
			v.Reason, ResumeCommand(plugin, commandArgs(), true))
	}
}

// invokedArgs are the arguments of the command being executed
// (ExecuteContext); a test runs many in one process.
var invokedArgs atomic.Pointer[[]string]

// commandArgs are the running command's arguments, without the program.
func commandArgs() []string {
	if a := invokedArgs.Load(); a != nil {
		return *a
	}
	return os.Args[1:]
}

// ResumeCommand is `kubectl <plugin> args…` quoted for a POSIX shell,
// credentials redacted, and without --stop-at when dropStopAt.
func ResumeCommand(plugin string, args []string, dropStopAt bool) string {
	words := []string{"kubectl", plugin}
	args = lease.RedactArgs(args)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if dropStopAt && (a == "--stop-at" || strings.HasPrefix(a, "--stop-at=")) {
			if a == "--stop-at" {
				i++
			}
			continue
		}
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	plain := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./:,@+%", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !plain(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
