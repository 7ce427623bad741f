package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// evacuation empties a node of actors: drain its workers (no new actor is
// placed there), then suspend every actor living there, round after round,
// until none is left. The node roll's drain and suspend steps and
// recover-node's suspend step all run it; only what they look at differs
// (recover-node narrows the node to its stale workers, nodeView).
type evacuation struct {
	api API
	rec kube.Recorder
	// How many suspends are in flight at once, the pause between starting
	// two, and whether a CRASHED actor is reverted (or stops the run).
	maxSuspends     int
	suspendInterval time.Duration
	revertCrashed   bool
	// registerTimeout bounds the wait for a worker pod on the node to
	// register as a worker (so it can be drained); past it, clearUnregistered
	// (nil: none, the run stops) takes such pods off the node.
	registerTimeout   time.Duration
	clearUnregistered func(context.Context, nodeFacts) error
	// look reads the node again between rounds; prev is the last round's.
	look func(ctx context.Context, prev nodeFacts) (nodeFacts, error)
	// record (nil: none) is handed each round's facts before the round
	// acts on them: the node roll writes AnnResidents.
	record func(context.Context, nodeFacts) error
	// settled (nil: none) gets the facts of the round that found the work
	// done: nothing changed after they were read.
	settled func(nodeFacts)
	// meter (nil: none) times the suspends; with a pace known, a suspend is
	// started only while the actors left fit the step's budget (its
	// context's deadline), and budget is the full --suspend-timeout a
	// re-run gets, for the advice. measured (nil: none) records the pace.
	meter    *paceMeter
	budget   time.Duration
	measured func(context.Context, Pace) error
}

// paceErr stops the evacuation before a suspend that the projection says
// cannot end within what is left of the budget (ok false); nil while it fits
// or no pace is known.
func (e *evacuation) paceErr(ctx context.Context, node string, left int) error {
	if e.meter == nil {
		return nil
	}
	deadline, ok := ctx.Deadline()
	pace := e.meter.pace()
	if !ok || !pace.Known() {
		return nil
	}
	p := Project(left, pace, e.maxSuspends, e.suspendInterval, time.Until(deadline))
	if p.Fits() {
		return nil
	}
	return runbook.Blocked(fmt.Errorf("suspending the actors left on node %s would outlast the budget: %s left of --suspend-timeout "+
		"%s. Stopped before burning it; the node stays drained and its other actors keep running. To finish it, %s",
		node, p.Describe(), e.budget, p.Fix(e.budget)))
}

// record writes the pace this run measured, if any.
func (e *evacuation) recordPace(ctx context.Context) error {
	if e.meter == nil || e.measured == nil || !e.meter.measured() {
		return nil
	}
	return e.measured(ctx, e.meter.pace())
}

// drain drains workers one by one and records them in one Event on the
// node (one per pass, naming each worker drained, also when a later drain
// fails): a node's workers are drained together, and one Event per worker
// cost a request each for the same audit line.
func (e *evacuation) drain(ctx context.Context, node *corev1.Node, workers []ateapi.Worker) (err error) {
	var done []string
	defer func() {
		if len(done) > 0 {
			e.rec.Record(ctx, kube.NodeRef(node), false, "WorkerDrained", fmt.Sprintf("DrainWorker %s: no new actors will be placed "+
				"there", strings.Join(done, ", ")))
		}
	}()
	for _, w := range workers {
		if _, err := e.api.DrainWorker(ctx, w.Name); err != nil && !errors.Is(err, ateapi.ErrNotFound) {
			return fmt.Errorf("drain worker %s (pod %s): %w", w.Name, w.Pod, err)
		}
		done = append(done, fmt.Sprintf("%s (pod %s, pool %s)", w.Name, w.Pod, w.Pool))
	}
	return nil
}

// waitDrained re-reads the node until every worker pod on it is a
// registered, draining worker: a list may leave out a worker that just
// changed, and a pod registers some time after it runs. Workers that
// appear meanwhile are drained too. f is what the caller just drained.
func (e *evacuation) waitDrained(ctx context.Context, f nodeFacts) error {
	deadline := time.Now().Add(e.registerTimeout)
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		select { // the caller just drained what f showed: read the node again first
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(delay):
		}
		g, err := e.look(ctx, f)
		if err != nil {
			return err
		}
		f = g
		if err := e.drain(ctx, f.node, f.undrained()); err != nil {
			return err
		}
		unreg := f.unregistered()
		if len(f.undrained()) == 0 && len(unreg) == 0 {
			if e.settled != nil {
				e.settled(f) // nothing was drained on these facts
			}
			return nil
		}
		if time.Now().After(deadline) {
			if err := e.unregisteredOut(ctx, f); err != nil {
				return err
			}
			deadline = time.Now().Add(e.registerTimeout)
		}
	}
}

// unregisteredOut is what happens to worker pods still unregistered after
// registerTimeout: taken off the node when the caller can, or the run
// stops, naming them.
func (e *evacuation) unregisteredOut(ctx context.Context, f nodeFacts) error {
	if e.clearUnregistered != nil {
		return e.clearUnregistered(ctx, f)
	}
	return runbook.Blocked(fmt.Errorf("worker pod(s) %s on node %s did not register as workers within %s, so they cannot be "+
		"drained and the node must not flip; re-run once they register (kubectl ate status)", fleet.Brief(f.unregistered()),
		f.node.Name, e.registerTimeout))
}

// empty suspends residents until none is left, draining what registered
// since each round. Worker pods that are not registered yet are waited for
// (registerTimeout), so they are drained too.
func (e *evacuation) empty(ctx context.Context, f nodeFacts) error {
	var unregisteredSince time.Time
	// Actors suspended here are confirmed one by one with GetActor: a list
	// may miss an actor whose state just changed, and a paused actor still
	// SUSPENDING off the node's atelet is lost if the node flips.
	pending := map[ateapi.ActorRef]bool{}
	for round := 1; ; round++ {
		if err := e.confirm(ctx, f.node.Name, pending); err != nil {
			return err
		}
		if e.record != nil {
			if err := e.record(ctx, f); err != nil {
				return err
			}
		}
		// Workers registered since the last pass must stop taking actors too.
		if err := e.drain(ctx, f.node, f.undrained()); err != nil {
			return err
		}
		live, crashed := f.residents()
		if len(crashed) > 0 {
			if err := e.revert(ctx, f.node, crashed); err != nil {
				return err
			}
		}
		unreg := f.unregistered()
		switch {
		case len(unreg) == 0:
			unregisteredSince = time.Time{}
		case unregisteredSince.IsZero():
			unregisteredSince = time.Now()
		case time.Since(unregisteredSince) > e.registerTimeout:
			if err := e.unregisteredOut(ctx, f); err != nil {
				return err
			}
			unregisteredSince = time.Now()
		}
		if f.empty() && len(pending) == 0 {
			if e.settled != nil {
				e.settled(f)
			}
			return nil
		}
		var todo []ateapi.Actor
		for _, a := range live {
			// An actor only its worker still names, already asked to
			// suspend, is being confirmed by GetActor: no second request.
			if !pending[a.Ref()] || a.State != ateapi.ActorUnspecified {
				todo = append(todo, a)
			}
			pending[a.Ref()] = true
		}
		todo, urgent := goingFirst(f, todo)
		if err := e.suspend(ctx, f.node, todo, urgent); err != nil {
			return err
		}
		select { // suspends and registrations take a moment; actors keep waking
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Duration(min(round, 10)) * 200 * time.Millisecond):
		}
		g, err := e.look(ctx, f)
		if err != nil {
			return err
		}
		f = g
	}
}

// revert reverts crashed actors with --revert-crashed, and stops the run
// without it.
func (e *evacuation) revert(ctx context.Context, node *corev1.Node, crashed []ateapi.Actor) error {
	if !e.revertCrashed {
		return runbook.Blocked(fmt.Errorf("%s; no further actor is touched. Revert them (`kubectl ate revert ACTOR -a ATESPACE`, "+
			"loses work since their last snapshot) or re-run with --revert-crashed", describeCrashed(crashed)))
	}
	for _, a := range crashed {
		if _, err := e.api.RevertActor(ctx, a.Atespace, a.Name); err != nil {
			return fmt.Errorf("revert crashed actor %s/%s: %w", a.Atespace, a.Name, err)
		}
		e.rec.Record(ctx, kube.NodeRef(node), true, "ActorReverted",
			fmt.Sprintf("reverted CRASHED actor %s/%s to its last external snapshot (--revert-crashed)", a.Atespace, a.Name))
	}
	return nil
}

// idlePod is a worker pod emptied by the evacuation, to be deleted: the
// pod as recorded, its UID (its worker's name) and why it goes ("" for the
// recorder's default).
type idlePod struct {
	ref corev1.ObjectReference
	uid types.UID
	why string
}

// deleteIdle deletes pods whose worker hosts no actor in an inventory read
// right before (a pod whose worker hosts one is never deleted: the run
// stops blocked, with hint), each through rec and only if its UID is
// unchanged.
func (e *evacuation) deleteIdle(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, pods []idlePod, hint string) error {
	inv, err := e.api.Inventory(ctx)
	if err != nil {
		return err
	}
	hosts := hostsByWorker(inv)
	var kept []string
	for _, p := range pods {
		a := hosts[string(p.uid)]
		if a == "" {
			// Lists may leave out a worker or actor that changed while they
			// ran: the pod's own worker is read directly, drained first if it
			// still takes actors, so none can land between this look and
			// the delete (an ateom exits on SIGTERM with its awake actors
			// lost, at the latest when the eviction window ends).
			if a, err = e.directHost(ctx, string(p.uid)); err != nil {
				return fmt.Errorf("worker of pod %s/%s: %w", p.ref.Namespace, p.ref.Name, err)
			}
		}
		if a != "" {
			kept = append(kept, p.ref.Namespace+"/"+p.ref.Name+" (hosts "+a+")")
			continue
		}
		if _, err := kube.DeleteIfUnchanged(ctx, rec, cs.CoreV1().Pods(p.ref.Namespace).Delete, p.ref, p.uid, p.why); err != nil {
			return fmt.Errorf("delete %s/%s: %w", p.ref.Namespace, p.ref.Name, err)
		}
	}
	if len(kept) > 0 {
		return runbook.Blocked(fmt.Errorf("not deleted, their worker hosts an actor: %s. %s", strings.Join(kept, ", "), hint))
	}
	return nil
}
