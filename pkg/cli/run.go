package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/notify"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
)

// Session is one run of a runbook command: its ID, the lock it holds, and
// where progress and mutations are reported. Every command that changes the
// cluster runs its runbooks through one Session.
type Session struct {
	RunID    string
	Client   kubernetes.Interface
	Flags    RunFlags
	Progress *ui.Progress
	// Recorder prints each mutation and writes it as an Event.
	Recorder kube.Recorder
	lock     *lease.Lock
	globals  *Globals
	cancel   context.CancelFunc
	plugin   string
	lockName string
	journal  *journal.Writer
	events   *kube.EventWriter // nil for a dry run
	pauses   *lease.PauseWatch // nil for a dry run
	// progress counts the session's last runbook run; it publishes the
	// run's outcome as the session ends.
	progress *progressReporter
	// The schedule's and --notify-url's state: schedule.go, notify.go.
	scheduleWhy  string
	scheduleNote sync.Once
	waiting      time.Time
	notifier     *notify.Notifier
	contextName  string
	// --metrics-bind-address's endpoint (metrics.go); nil without it.
	metrics       *runMetrics
	metricsServer *http.Server
}

// ContextName is the kube context the session acts in.
func (s *Session) ContextName() string { return s.contextName }

// DryRun reports whether the session only plans.
func (s *Session) DryRun() bool { return s.Flags.DryRun }

// StartSession connects, says where it acts, takes the Lease lockName (not
// for dry runs, which only note a holder) and sets up reporting. ctx is
// replaced by one that is cancelled if the lock is lost. End the session with
// Finish or Fail.
func StartSession(ctx context.Context, g *Globals, f RunFlags, plugin, lockName string) (*Session, context.Context, error) {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return nil, ctx, err
	}
	s := &Session{RunID: NewRunID(), Client: cs, Flags: f, globals: g, plugin: plugin, lockName: lockName,
		contextName: g.ContextName()}
	progressOut := g.IOStreams.Out
	if f.Output != "" {
		progressOut = g.IOStreams.ErrOut
	}
	s.Progress = ui.NewProgress(progressOut)
	s.Progress.Printf("%s", Where(g))
	if f.DryRun {
		s.Recorder = s.Progress
		if held, err := lease.Peek(ctx, cs, f.LockNamespace, lockName); err == nil && held != nil {
			s.Progress.Printf("note: %v", held)
		}
		return s, ctx, nil
	}
	holder := lease.CurrentHolder(ctx, cs, s.RunID)
	// The command as executed (a test executes many in one process).
	holder.Command = strings.Join(lease.RedactArgs(append([]string{os.Args[0]}, commandArgs()...)), " ")
	lock, err := lease.Acquire(ctx, cs, f.LockNamespace, lockName, holder, lease.LockOptions{
		Steal:  f.StealLock,
		Notify: func(msg string) { s.Progress.Printf("%s", msg) },
	})
	if err != nil {
		s.Progress.Close()
		if _, nsErr := cs.CoreV1().Namespaces().Get(ctx, f.LockNamespace, metav1.GetOptions{}); apierrors.IsNotFound(nsErr) {
			return nil, ctx, UsageErrorf("namespace %q of --lock-namespace does not exist; pass an existing one (the default is the "+
				"plugin's own namespace)", f.LockNamespace)
		}
		return nil, ctx, err
	}
	s.lock = lock
	s.events = &kube.EventWriter{Client: cs, Component: "kubectl-" + plugin, Instance: s.RunID}
	s.Recorder = kube.Recorders{s.Progress, s.events}
	s.pauses = lease.NewPauseWatch(cs, f.LockNamespace, lockName, lock)
	ctx, s.cancel = lock.WithLock(ctx)
	// Every write of this run's clients asks the lock first; the history
	// records even a run that lost it.
	g.Gate.Arm(lock, lease.ObjectPath(f.LockNamespace, "configmaps", journal.Name(plugin)))
	s.journal = &journal.Writer{Client: cs, Namespace: f.LockNamespace, Name: journal.Name(plugin), Batch: journalBatch,
		Base: journal.Entry{Run: s.RunID, User: holder.User, Host: holder.Host, Command: holder.Command}}
	s.Recorder = append(s.Recorder.(kube.Recorders), s.journal)
	started := "run started"
	if note := lock.TakeoverNote(); note != "" {
		started += "; " + note
	}
	// The start goes with the run's first journal write rather than one
	// of its own: every mutation after it is an Event at once anyway.
	s.deferNote("RunStarted", started)
	return s, ctx, nil
}

// flushBeforeLongSteps writes the journal's pending records as a timed step
// (one that may wait on the cluster: a helper, a drain) starts acting: a run
// killed during such a step (the likely moment) has journaled all it changed
// before it, at one update per long step rather than one per step. Records
// of the step itself follow within journalBatch.
type flushBeforeLongSteps struct {
	runbook.Reporter
	journal *journal.Writer
}

func (f flushBeforeLongSteps) Step(target string, r runbook.StepResult) {
	if r.Status == runbook.StepActing && r.Budget > 0 {
		// Alongside the step's first request rather than before it: the
		// step is a long one, so the write lands early in it.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = f.journal.Flush(ctx)
		}()
	}
	f.Reporter.Step(target, r)
}

// journalBatch is how long recorded mutations wait to be journaled
// together (unless a timed step starts first): one ConfigMap update per
// long step or two seconds of a run, however many steps and nodes they span,
// instead of one per mutation. Events are posted as they are recorded (in a
// serial run at once, in a parallel one queued off the step's path), so a
// SIGKILLed run's last records survive there.
const journalBatch = 2 * time.Second

// deferNote journals a line about the run itself with its next write.
func (s *Session) deferNote(reason, message string) {
	e := s.journal.Base
	e.Object, e.Reason, e.Message = "lease/"+s.Flags.LockNamespace+"/"+s.lockName, reason, message
	_ = s.journal.Defer(e) // encoding an Entry does not fail
}

// note journals a line about the run itself (its start and end).
func (s *Session) note(ctx context.Context, reason, message string) {
	if s.journal == nil {
		return
	}
	e := s.journal.Base
	e.Object, e.Reason, e.Message = "lease/"+s.Flags.LockNamespace+"/"+s.lockName, reason, message
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.journal.Append(wctx, e); err != nil {
		s.Progress.Printf("warning: could not write the run's history: %v", err)
	}
}

// Where is the line every mutating run starts with: the kube context,
// cluster and user it acts as (never a credential).
func Where(g *Globals) string {
	raw, err := g.ConfigFlags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return "acting on: (kubeconfig unreadable: " + err.Error() + ")"
	}
	name := raw.CurrentContext
	if c := g.ConfigFlags.Context; c != nil && *c != "" {
		name = *c
	}
	kctx := raw.Contexts[name]
	if kctx == nil {
		return fmt.Sprintf("acting on context %q", name)
	}
	cluster, user := kctx.Cluster, kctx.AuthInfo
	if c := g.ConfigFlags.ClusterName; c != nil && *c != "" {
		cluster = *c
	}
	if u := g.ConfigFlags.AuthInfoName; u != nil && *u != "" {
		user = *u
	}
	line := fmt.Sprintf("acting on context %q (cluster %q, user %q", name, cluster, user)
	if as := g.ConfigFlags.Impersonate; as != nil && *as != "" {
		line += fmt.Sprintf(", as %q", *as)
	}
	return line + ")"
}

// Run runs rb over targets in this session. It honours a pause (kubectl
// <plugin> pause) before each target starts.
func Run[F any](ctx context.Context, s *Session, rb *runbook.Runbook[F], targets []runbook.Target, o runbook.Options) runbook.Result {
	return runbook.Run(ctx, rb, targets, s.options(ctx, o, len(targets)))
}

// RunSource runs rb over the targets src yields, each decided as it may
// start (runbook.RunSource), in this session: the same pause, soak, journal
// and lock as Run.
func RunSource[F any](ctx context.Context, s *Session, rb *runbook.Runbook[F], src iter.Seq[runbook.Target],
	o runbook.Options) runbook.Result {
	return runbook.RunSource(ctx, rb, src, s.options(ctx, o, 0))
}

// options are o as this session runs a runbook: its run ID and dry run,
// its progress, the journal written before long steps, the pause on its
// Lease, the run's out-of-service allowance declared there and its progress
// published there (total targets; 0 when not known up front).
func (s *Session) options(ctx context.Context, o runbook.Options, total int) runbook.Options {
	o.RunID, o.DryRun = s.RunID, s.DryRun()
	if o.Now == nil {
		// Step budgets are stored on the targets and judged by later runs,
		// maybe on other machines: on the API server's clock.
		o.Now = kube.ServerNow
	}
	if o.Reporter == nil {
		o.Reporter = s.Progress
	}
	if s.journal != nil {
		o.Reporter = flushBeforeLongSteps{o.Reporter, s.journal}
	}
	pr := &progressReporter{Reporter: o.Reporter, lock: s.lock, started: time.Now(),
		p: RunProgress{Run: s.RunID, Total: total, Parallel: max(o.Parallel, 1)}}
	s.progress = pr
	if s.metrics != nil {
		s.metrics.progress.Store(pr)
	}
	pr.publish()
	o.Reporter = pr
	if !s.DryRun() {
		s.Progress.SetRun(total, pr.Tally)
	}
	if o.Paused == nil {
		o.Paused = s.Paused
	}
	if o.Parallel > 1 && s.events != nil {
		// Several nodes at once: a step's Events no longer hold up the
		// next node's turn (a cordon decides one at a time). A serial run
		// keeps them written at once, so an Event marks where it is.
		s.events.Start()
	}
	if !s.DryRun() {
		// Declare the run's out-of-service allowance where others can check it.
		if err := s.SetMaxOutOfService(ctx, max(o.Parallel, 1)); err != nil {
			s.Progress.Printf("warning: could not record the parallel limit on the lease: %v", err)
		}
	}
	return o
}

// Paused reports whether the roll is paused, and by whom. A pause that
// cannot be read counts as none: the lock already guards against a second run.
func (s *Session) Paused(ctx context.Context) (bool, string) {
	var p *lease.Pause
	var err error
	if s.pauses != nil {
		// Watched, not read per target: no request per node.
		p, err = s.pauses.Current(ctx)
	} else {
		p, err = lease.ReadPause(ctx, s.Client, s.Flags.LockNamespace, s.lockName)
	}
	if err != nil || p == nil {
		return false, ""
	}
	return true, fmt.Sprintf("%s; `kubectl %s resume`, then re-run this command", p, s.plugin)
}

// SetMaxOutOfService declares on the held Lease how many nodes this run may
// take out of service at once, so anyone watching (the simulated cluster's
// invariant monitor, a person with kubectl) can check the run keeps to it.
func (s *Session) SetMaxOutOfService(ctx context.Context, n int) error {
	if s.lock == nil {
		return nil
	}
	v := strconv.Itoa(n)
	if cur, ok := s.lock.Annotation(AnnMaxOutOfService); ok && cur == v {
		return nil
	}
	return s.lock.SetAnnotation(ctx, AnnMaxOutOfService, &v)
}

// AnnMaxOutOfService is the Lease annotation SetMaxOutOfService writes.
const AnnMaxOutOfService = "rollbook.dev/max-out-of-service"

// Finish says what the run leaves behind on nodes it did not finish, prints
// the result (text summary with the next command, or JSON/YAML on stdout),
// releases the lock and returns an error carrying the exit code.
func (s *Session) Finish(r runbook.Result, next string) error {
	if r.Outcome == runbook.OutcomePaused && s.scheduleWhy != "" {
		next = s.scheduleWhy
	}
	if !s.DryRun() {
		s.markLeftCordoned(r)
		s.note(context.Background(), "RunFinished", "outcome "+string(r.Outcome))
	}
	s.notifyEnd(r)
	s.recordOutcome(r.Outcome)
	s.end()
	if s.Flags.Output != "" {
		if err := ui.PrintObject(s.globals.IOStreams.Out, s.Flags.Output, r); err != nil {
			return err
		}
	} else {
		ui.PrintSummary(s.globals.IOStreams.Out, r, next)
	}
	return OutcomeError(r)
}

// Fail ends a session that stopped before or between runbooks with err:
// it releases the lock and returns err for the command to report.
func (s *Session) Fail(err error) error {
	if err != nil {
		s.note(context.Background(), "RunFinished", "stopped: "+err.Error())
	}
	switch ExitCode(err) {
	case ExitOK:
		s.recordOutcome(runbook.OutcomeDone)
	case ExitBlocked:
		s.recordOutcome(runbook.OutcomeBlocked)
	default:
		s.recordOutcome(runbook.OutcomeFailed)
	}
	s.end()
	return err
}

// recordOutcome publishes how the run ended on its Lease (written as the
// lock is released): status --wait exits by it.
func (s *Session) recordOutcome(o runbook.Outcome) {
	if s.metrics != nil {
		s.metrics.ended(o)
	}
	if s.lock == nil {
		return
	}
	if s.progress == nil {
		s.progress = &progressReporter{lock: s.lock, p: RunProgress{Run: s.RunID}}
	}
	s.progress.end(o)
}

func (s *Session) end() {
	s.closeNotifier()
	s.closeMetrics()
	if s.events != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.events.Close(ctx); err != nil {
			s.Progress.Printf("warning: %v (the run's history has every record)", err)
		}
		cancel()
	}
	if s.journal != nil {
		// Normally the run's last note wrote it; a failed write is retried.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.journal.Flush(ctx); err != nil {
			s.Progress.Printf("warning: could not write the run's history: %v", err)
		}
		cancel()
	}
	s.Progress.Close()
	if s.pauses != nil {
		s.pauses.Close()
	}
	if s.lock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.lock.Release(ctx); err != nil {
			fmt.Fprintf(s.globals.IOStreams.ErrOut, "warning: could not release the lock: %v (it expires by itself)\n", err)
		}
		s.lock = nil
		s.globals.Gate.Disarm()
	}
	if s.cancel != nil {
		s.cancel()
	}
}

// markLeftCordoned writes, on every node of r that the run did not finish
// and that stays cordoned by rollbook, why it is cordoned: the cluster then
// says so too, not only this terminal.
func (s *Session) markLeftCordoned(r runbook.Result) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, t := range r.Targets {
		node := t.Ref.Name
		if t.Ref.Kind != "Node" || t.Outcome == runbook.OutcomeDone || t.Outcome == runbook.OutcomePlanned {
			continue
		}
		why := fmt.Sprintf("run %s stopped (%s) at step %s", r.RunID, t.Outcome, t.State)
		if msg := stopReason(t); msg != "" {
			why += ": " + msg
		}
		if marked, err := kube.MarkLeftCordoned(ctx, s.Client, node, why); err != nil {
			s.Progress.Printf("warning: could not record on node/%s why it stays cordoned: %v", node, err)
		} else if marked {
			s.Progress.Printf("node/%s stays cordoned by rollbook: %s", node, why)
		}
	}
}

// stopReason is what stopped a target: its error, or its stopping step's.
func stopReason(t runbook.TargetResult) string {
	if t.Error != "" {
		return t.Error
	}
	for _, st := range t.Steps {
		if st.Error != "" {
			return st.Error
		}
	}
	return ""
}

// Lock is the held lock, or nil for a dry run.
func (s *Session) Lock() *lease.Lock { return s.lock }

// OutcomeError maps a run's outcome to an error with the matching exit code
// (nil when done or planned).
func OutcomeError(r runbook.Result) error {
	switch r.Outcome {
	case runbook.OutcomeDone, runbook.OutcomePlanned:
		return nil
	case runbook.OutcomeBlocked:
		return WithExitCode(ExitBlocked, errors.New("blocked: a step needs a person (see above); fix it and re-run the same command"))
	case runbook.OutcomePaused:
		return nil
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
