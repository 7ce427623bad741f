package runbook

import (
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// StepStatus is where a step stands in a run.
type StepStatus string

// The statuses a step reports, live and in results.
const (
	StepDone        StepStatus = "done"        // observed done before this run touched it
	StepActed       StepStatus = "acted"       // this run did it and verified it
	StepActing      StepStatus = "acting"      // in progress (live progress only)
	StepWaiting     StepStatus = "waiting"     // acted, waiting for the result (live progress only)
	StepWouldAct    StepStatus = "would-act"   // dry run: would act now
	StepPending     StepStatus = "pending"     // not reached
	StepBlocked     StepStatus = "blocked"     // a guard or the cluster needs a human
	StepFailed      StepStatus = "failed"      // acting or verifying failed
	StepInterrupted StepStatus = "interrupted" // the run was stopped during this step
)

// Outcome is how a run, or one target of it, ended.
type Outcome string

// The outcomes of a run and of each target, least to most severe in Worst.
const (
	OutcomeDone        Outcome = "done"
	OutcomePlanned     Outcome = "planned" // dry run
	OutcomeBlocked     Outcome = "blocked"
	OutcomeFailed      Outcome = "failed"
	OutcomeInterrupted Outcome = "interrupted"
	OutcomeSkipped     Outcome = "skipped" // not started: an earlier target halted the run
	OutcomePaused      Outcome = "paused"  // not started: the roll is paused (kubectl <plugin> pause)
)

// severity orders outcomes; a run's outcome is its worst target's.
var severity = map[Outcome]int{OutcomeDone: 0, OutcomePlanned: 1, OutcomePaused: 2, OutcomeSkipped: 3, OutcomeBlocked: 4,
	OutcomeInterrupted: 5, OutcomeFailed: 6}

// StepResult is one step of one target.
type StepResult struct {
	ID       string        `json:"id"`
	Title    string        `json:"title"`
	Status   StepStatus    `json:"status"`
	Evidence string        `json:"evidence,omitempty"`
	Changes  []Change      `json:"changes,omitempty"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"durationNs,omitempty"`
	// Budget is the step's timeout and Started when its clock started.
	Budget  time.Duration `json:"timeoutNs,omitempty"`
	Started *time.Time    `json:"started,omitempty"`
	// staleClock: the step is done and its clock is still on the target,
	// to be removed after the next step acts.
	staleClock bool
}

// TargetResult is one target of a run.
type TargetResult struct {
	Target string `json:"target"`
	// Ref is the object the target is (a node), or where its events go.
	Ref     corev1.ObjectReference `json:"ref"`
	Outcome Outcome                `json:"outcome"`
	State   string                 `json:"state"` // the first step not done, or "done"
	Steps   []StepResult           `json:"steps"`
	Notes   []string               `json:"notes,omitempty"`
	Error   string                 `json:"error,omitempty"`
	// holdsSlot: the target stopped while out of service, so it keeps its
	// place in the parallel limit (Runbook.OutOfService).
	holdsSlot bool
	// cause is the error that failed the target, for the engine's retry of
	// transient API errors.
	cause error
}

// Result is a whole run.
type Result struct {
	Runbook string         `json:"runbook"`
	RunID   string         `json:"runID"`
	DryRun  bool           `json:"dryRun"`
	Outcome Outcome        `json:"outcome"`
	Targets []TargetResult `json:"targets"`
	// Stopped says why the run started no further target (a pause, a failed
	// soak, the parallel limit held by stopped targets), "" otherwise.
	Stopped string `json:"stopped,omitempty"`
	// stoppedBy is the outcome of that stop for targets not started.
	stoppedBy Outcome
}

// Worst returns the more severe outcome.
func Worst(a, b Outcome) Outcome {
	if severity[b] > severity[a] {
		return b
	}
	return a
}

// Merge is one Result for a session that ran several runbooks in turn:
// every target result in order, and the worst outcome.
func Merge(name string, results ...Result) Result {
	out := Result{Runbook: name, Outcome: OutcomeDone}
	for i, r := range results {
		if i == 0 {
			out.RunID, out.DryRun = r.RunID, r.DryRun
			out.Outcome = r.Outcome
		}
		out.Outcome = Worst(out.Outcome, r.Outcome)
		out.Targets = append(out.Targets, r.Targets...)
		if r.Stopped != "" {
			out.Stopped = r.Stopped
		}
	}
	return out
}

// BlockedError marks a stop that needs a human (a PDB, a device holder, a
// foreign cordon) as opposed to a failure.
type BlockedError struct{ Err error }

func (e *BlockedError) Error() string { return e.Err.Error() }
func (e *BlockedError) Unwrap() error { return e.Err }

// Blocked wraps err as a BlockedError.
func Blocked(err error) error {
	if err == nil {
		return nil
	}
	return &BlockedError{Err: err}
}

// AgainError marks a step that found, in its own last look before acting,
// that the world moved since the observation it was decided on (a pod
// landed, a resident appeared) and so did nothing: the target is observed
// again and carried on, as after a transient API error.
type AgainError struct{ Err error }

func (e *AgainError) Error() string { return e.Err.Error() }
func (e *AgainError) Unwrap() error { return e.Err }

// Again wraps err as an AgainError.
func Again(err error) error {
	if err == nil {
		return nil
	}
	return &AgainError{Err: err}
}

// IsAgain reports whether err is, or wraps, an AgainError.
func IsAgain(err error) bool {
	var a *AgainError
	return errors.As(err, &a)
}

// IsBlocked reports whether err is, or wraps, a BlockedError.
func IsBlocked(err error) bool {
	var b *BlockedError
	return errors.As(err, &b)
}
