package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
)

// RunFlags are the flags of every mutating command.
type RunFlags struct {
	DryRun        bool
	Output        string
	StealLock     bool
	LockNamespace string
}

// AddFlags registers --dry-run, -o, --steal-lock and --lock-namespace.
func (f *RunFlags) AddFlags(fs *pflag.FlagSet, defaultLockNamespace string) {
	fs.BoolVar(&f.DryRun, "dry-run", false, "print the plan — every step and every object it would change — and change nothing")
	fs.StringVarP(&f.Output, "output", "o", "", "output format of the result: json|yaml (progress then goes to stderr)")
	fs.BoolVar(&f.StealLock, "steal-lock", false, "take over the lock from a run that stopped renewing it (never from a live one)")
	fs.StringVar(&f.LockNamespace, "lock-namespace", defaultLockNamespace, "namespace of the Lease that keeps two runs from fighting")
}

// Validate rejects bad values before any API call.
func (f *RunFlags) Validate() error {
	if err := ui.ValidateOutput(f.Output, "json", "yaml"); err != nil {
		return UsageErrorf("%v", err)
	}
	return nil
}

// Session is one run of a runbook command: its ID, the lock it holds, and
// where progress and mutations are reported.
type Session struct {
	RunID    string
	Client   kubernetes.Interface
	Flags    RunFlags
	Progress *ui.Progress
	// Recorder prints each mutation and writes it as an Event.
	Recorder kube.Recorder
	lock     *runbook.Lock
	globals  *Globals
}

// StartSession connects, takes the Lease lockName (not for dry runs, which
// only warn when someone holds it) and sets up reporting. ctx is replaced
// by one that is cancelled if the lock is lost. Call Finish when done.
func StartSession(ctx context.Context, g *Globals, f RunFlags, plugin, lockName string) (*Session, context.Context, error) {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return nil, ctx, err
	}
	s := &Session{RunID: NewRunID(), Client: cs, Flags: f, globals: g}
	progressOut := g.IOStreams.Out
	if f.Output != "" {
		progressOut = g.IOStreams.ErrOut
	}
	s.Progress = ui.NewProgress(progressOut)
	s.Recorder = kube.Recorders{s.Progress, &kube.EventWriter{Client: cs, Component: "kubectl-" + plugin, Instance: s.RunID}}
	if f.DryRun {
		s.Recorder = s.Progress
		if held, err := runbook.Peek(ctx, cs, f.LockNamespace, lockName, 0); err == nil && held != nil {
			s.Progress.Printf("note: %v", held)
		}
		return s, ctx, nil
	}
	holder := runbook.CurrentHolder(ctx, cs, s.RunID)
	lock, err := runbook.Acquire(ctx, cs, f.LockNamespace, lockName, holder, runbook.LockOptions{Steal: f.StealLock})
	if err != nil {
		s.Progress.Close()
		return nil, ctx, err
	}
	s.lock = lock
	ctx, _ = lock.WithLock(ctx)
	return s, ctx, nil
}

// Finish prints the result (text summary with the next command, or JSON/YAML
// on stdout), releases the lock and returns an error carrying the exit code.
func (s *Session) Finish(r runbook.Result, next string) error {
	s.Progress.Close()
	if s.lock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.lock.Release(ctx); err != nil {
			fmt.Fprintf(s.globals.IOStreams.ErrOut, "warning: could not release the lock: %v (it expires by itself)\n", err)
		}
	}
	if s.Flags.Output != "" {
		if err := ui.PrintObject(s.globals.IOStreams.Out, s.Flags.Output, r); err != nil {
			return err
		}
	} else {
		ui.PrintSummary(s.globals.IOStreams.Out, r, next)
	}
	return OutcomeError(r)
}

// OutcomeError maps a run's outcome to an error with the matching exit code
// (nil when done or planned).
func OutcomeError(r runbook.Result) error {
	switch r.Outcome {
	case runbook.OutcomeDone, runbook.OutcomePlanned:
		return nil
	case runbook.OutcomeBlocked:
		return WithExitCode(ExitBlocked, errors.New("blocked: a step needs a person (see above); fix it and re-run the same command"))
	case runbook.OutcomeInterrupted:
		return WithExitCode(ExitFailed, errors.New("interrupted; re-run the same command to continue where it stopped"))
	default:
		return WithExitCode(ExitFailed, errors.New("failed (see above); re-run the same command after fixing the cause"))
	}
}

// NewRunID is a short unique ID for a run: UTC time plus randomness.
func NewRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// Abort ends a session that failed before it ran anything: it releases the
// lock and prints nothing.
func (s *Session) Abort() error {
	s.Progress.Close()
	if s.lock == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.lock.Release(ctx)
}

// Lock is the held lock, or nil for a dry run.
func (s *Session) Lock() *runbook.Lock { return s.lock }
