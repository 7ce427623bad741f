// Package runbook is the engine both plugins run their runbooks on. A
// runbook is an ordered list of steps; each step says, from observed cluster
// state alone, whether it is done, what must hold before it may act, how to
// act (safely repeatable) and how to wait for the result. A target's state
// is its first step not yet done, so re-running a command resumes exactly
// where the last run stopped, from any terminal, with no local state.
package runbook

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Target is one thing a runbook advances: a node, or the roll as a whole.
type Target interface {
	// Name is how the target is shown, e.g. "node/kwok-node-0".
	Name() string
	// Ref is the object events about the target are attached to.
	Ref() corev1.ObjectReference
	// Annotation reads one of rollbook's annotations from the live object.
	Annotation(ctx context.Context, key string) (string, bool, error)
	// SetAnnotation writes (or with nil, removes) one annotation.
	SetAnnotation(ctx context.Context, key string, value *string) error
}

// Runbook is an ordered list of steps over facts F observed per target.
type Runbook[F any] struct {
	// Name is stable and short ("tt-kmd"); it owns cordons and names timers.
	Name  string
	Title string
	Doc   string
	Steps []Step[F]
	// Observe reads everything the steps decide on, for one target.
	Observe func(ctx context.Context, t Target) (F, error)
	// ObserveParts, when set, reads only the parts of the facts asked for
	// and carries the others over from prev (the target's last
	// observation). After a step acts, the engine asks for what that step's
	// Done and the next step read (Step.Reads), not for everything.
	ObserveParts func(ctx context.Context, t Target, parts Parts, prev F) (F, error)
	// Annotation, when set, reads one of the target's annotations from the
	// observed facts, saving the engine a read for step clocks.
	Annotation func(f F, key string) (string, bool)
	// Notes, when set, says what a person should know about a target the run
	// left unfinished (e.g. "cordoned by rollbook; re-run to continue").
	Notes func(f F) []string
	// OutOfService, when set, says whether a target is out of service (e.g.
	// cordoned by this runbook). A target that stops out of service keeps
	// its place in Options.Parallel, so failures never let more targets out
	// of service than the limit, even when the run keeps going.
	OutOfService func(f F) bool
}

// Step is one idempotent action and the observation that proves it done.
type Step[F any] struct {
	// ID is stable across releases (e.g. "tt.kmd.cordon"): docs, JSON output
	// and timers refer to it.
	ID    string
	Title string
	// Doc is the runbook's own paragraph for this step.
	Doc string
	// Done decides from facts alone whether the step's effect is in place,
	// with the evidence that shows it. It must be pure.
	Done func(f F) (done bool, evidence string)
	// Guards must all hold before Act may run; a failing guard blocks the
	// run with its reason and nothing is changed.
	Guards []Guard[F]
	// Plan lists what Act would change, for --dry-run. Pure.
	Plan func(f F) []Change
	// Act makes the change. It must be safe to repeat after any interruption.
	// Return Blocked(err) for a stop that needs a human, not a failure.
	Act func(ctx context.Context, f F) error
	// Wait, when set, blocks (watching, not sleeping) until the step's effect
	// can be observed. Without it the step is re-observed right after Act.
	Wait func(ctx context.Context, f F) error
	// Timeout bounds Act plus Wait. Its start time is stored on the target,
	// so a re-run keeps the same budget instead of starting a new one.
	Timeout time.Duration
	// Reads is the parts of the facts Done, Guards, Plan, Act and Wait use
	// (zero: all of them). Parts it leaves out may be carried over from an
	// earlier observation, so a step must read every part it decides on.
	Reads Parts
	// DoneReads, when set, is the fewer parts Done alone reads: what the
	// observation that verifies the step's effect must read.
	DoneReads Parts
	// Unchanged are parts Act cannot change as Done and the next step use
	// them (a label's write and the helper pods the cleanup after it
	// deletes). The observation after Act carries them from the one Act
	// decided on instead of reading them again; not after a Wait, during
	// which anything may change. Only parts ObserveParts carries.
	Unchanged Parts
	// Exclusive marks a step whose guards spend a budget shared by targets
	// (e.g. a cordon against --max-parallel nodes out of service). Across a
	// run's targets such steps run one at a time, each deciding its guards
	// on an observation made inside that exclusion, so two targets can never
	// both pass on the same count. A failing SharedBudget guard waits while
	// other targets of the run are in progress (one may free the budget) and
	// blocks only when none is; any other failing guard blocks at once. Keep
	// Act short: it runs inside the exclusion (its Wait and the observation
	// of its result do not; Act's writes must spend the budget).
	Exclusive bool
}

// Parts is a set of parts of a runbook's facts; the runbook defines the
// bits (e.g. the node, its pods, the fleet's cordons).
type Parts uint64

// AllParts is every part of the facts.
const AllParts = ^Parts(0)

// Guard is a precondition of a step.
type Guard[F any] struct {
	Name  string
	Check func(f F) (ok bool, reason string)
	// SharedBudget marks a guard that spends a budget the run's targets
	// share (nodes out of service): on an Exclusive step it waits for
	// another target of the run to end instead of blocking at once.
	SharedBudget bool
	// Settle, on a SharedBudget guard, watches (bounded) for what the guard
	// decides on to change outside the run too (a PodDisruptionBudget's
	// replaced pod becoming ready): the step waits for another target's
	// end or for Settle to report true, whichever comes first, then
	// observes again; it blocks only when neither can come. Called outside
	// the exclusion; ctx ends when another target ended first.
	Settle func(ctx context.Context, f F) bool
	// Uniform, on a SharedBudget guard with no Settle, says the guard
	// decides alike for every target of the run not yet out of service (a
	// count of the run's targets out, not this target's labels or pods).
	// Once it failed, a target that reaches the step before the next end
	// waits for that end before observing: it would only find the same.
	// A target-specific guard that would have blocked it then says so
	// after that end, not before.
	Uniform bool
	// LastShare, on a Uniform guard, reports that the budget it passed on f
	// has one share left, which the passing target takes: the targets
	// reaching the step after it, before the next end, wait for that end
	// before observing, as after a failed decision.
	LastShare func(f F) bool
}

// Change is one object the plan would change, and how.
type Change struct {
	Object string `json:"object"`
	Action string `json:"action"`
	Detail string `json:"detail,omitempty"`
}

type stepKey struct{}

// WithStep returns ctx carrying the ID of the step acting, so what the step
// records (events, the journal) names it.
func WithStep(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, stepKey{}, id)
}

// StepOf returns the ID of the step acting in ctx, or "".
func StepOf(ctx context.Context) string {
	id, _ := ctx.Value(stepKey{}).(string)
	return id
}
