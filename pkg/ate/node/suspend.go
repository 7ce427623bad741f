package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// SuspendByHand is how a person suspends one actor with this plugin (the
// substrate's own CLI spells it "suspend actor"; kubectl ate has no such
// command).
const SuspendByHand = `kubectl ate api call SuspendActor -d '{"actor":{"atespace":"ATESPACE","name":"NAME"}}' --yes`

// actorByHand is how a person reads one actor with this plugin.
func actorByHand(atespace, name string) string {
	return fmt.Sprintf(`kubectl ate api call GetActor -d '{"actor":{"atespace":%q,"name":%q}}'`, atespace, name)
}

// confirm drops the actors that are SUSPENDED, gone, or no longer on node
// from pending, reading each one directly.
func (e *evacuation) confirm(ctx context.Context, node string, pending map[ateapi.ActorRef]bool) error {
	for r := range pending {
		a, err := e.api.GetActor(ctx, r.Atespace, r.Name)
		switch {
		case errors.Is(err, ateapi.ErrNotFound):
			delete(pending, r)
		case errors.Is(err, ateapi.ErrPermissionDenied):
			return runbook.Blocked(deniedErr(r, node, err))
		case err != nil:
			return err
		case a.State == ateapi.ActorSuspended || !a.OnNode(node):
			delete(pending, r)
		}
	}
	return nil
}

// deniedErr is a refused read or suspend of an actor living on node: the
// node cannot be emptied with this client's token.
func deniedErr(r ateapi.ActorRef, node string, err error) error {
	return fmt.Errorf("actor %s on node %s: %w; the node cannot be emptied, so it does not flip. Allow the client's identity "+
		"(the ate-client ServiceAccount, or the --ate-token-file token's) to list, get and suspend actors in atespace %s in the "+
		"API server's authorization policy, or use a token that may, then re-run", r, node, err, r.Atespace)
}

// suspend suspends actors, a few at a time, and records the ones it
// suspended in one Event on the node per round (naming each, with its
// state before and after), written once the round's calls have returned.
//
// The first urgent actors sit on workers whose pods are already going:
// the eviction window, not the budget, is what they race, and stopping
// would leave them to it, so the pace check never stops a run before them.
func (e *evacuation) suspend(ctx context.Context, node *corev1.Node, actors []ateapi.Actor, urgent int) error {
	sem := make(chan struct{}, max(1, e.maxSuspends))
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		errs      []error
		suspended []string
	)
	defer func() {
		wg.Wait()
		if err := e.recordPace(ctx); err != nil {
			e.rec.Record(ctx, kube.NodeRef(node), true, "SuspendPaceNotRecorded", err.Error())
		}
		if len(suspended) > 0 {
			sort.Strings(suspended)
			e.rec.Record(ctx, kube.NodeRef(node), false, "ActorSuspended", fmt.Sprintf("suspended %s to empty node %s",
				strings.Join(suspended, ", "), node.Name))
		}
	}()
	for i, a := range actors {
		if a.State.Transient() && a.State != ateapi.ActorUnspecified {
			continue // it moves on its own; the next round sees where it went
		}
		if i > 0 && e.suspendInterval > 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(e.suspendInterval):
			}
		}
		sem <- struct{}{}
		if err := e.paceErr(ctx, node.Name, len(actors)-i); err != nil && i >= urgent {
			<-sem
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			return errors.Join(append(errs, err)...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			got, err := e.api.SuspendActor(ctx, a.Atespace, a.Name)
			var ae *ateapi.Error
			switch {
			case err == nil:
				awake := a.State == ateapi.ActorRunning || a.State == ateapi.ActorPaused
				if e.meter != nil && got.State == ateapi.ActorSuspended && awake {
					// The call held its slot until SUSPENDED: that is what
					// bounds the rate. A call answering SUSPENDING held it
					// for less than the suspend takes, and is not a pace.
					e.meter.observe(time.Since(start))
				}
				mu.Lock()
				suspended = append(suspended, fmt.Sprintf("%s/%s (was %s, now %s)", a.Atespace, a.Name, a.State, got.State))
				mu.Unlock()
			case errors.Is(err, ateapi.ErrNotFound):
			case errors.Is(err, ateapi.ErrPermissionDenied):
				mu.Lock()
				errs = append(errs, runbook.Blocked(deniedErr(a.Ref(), node.Name, err)))
				mu.Unlock()
			case errors.Is(err, ateapi.ErrDataLoss):
				// crashed: the next round reports it with the others
			case errors.As(err, &ae) && (ae.ActorState.Transient() || ae.ActorState == ateapi.ActorCrashed):
				// Mid-transition (resuming, suspending…) or crashed: the next round sees it again.
			case errors.Is(err, ateapi.ErrFailedPrecondition):
				state := ateapi.ActorUnspecified
				if ae != nil && ae.ActorState != "" {
					state = ae.ActorState
				}
				mu.Lock()
				errs = append(errs, runbook.Blocked(fmt.Errorf("suspend %s/%s refused: the actor is %s, a state it does not leave on "+
					"its own; "+
					"no further actor is touched. Find out why (%s), then "+
					"re-run", a.Atespace, a.Name, state, actorByHand(a.Atespace, a.Name))))
				mu.Unlock()
			case errors.Is(err, ateapi.ErrUnavailable) && strings.Contains(err.Error(), "atelet"):
				// A suspend checkpoints through the atelet of the worker's
				// own node (a paused actor's: of its snapshot's node), of
				// the worker's version; retrying cannot bring it back.
				mu.Lock()
				errs = append(errs, runbook.Blocked(fmt.Errorf("suspend %s/%s refused: %w. No atelet of its worker's version answers "+
					"on node %s; no further actor is touched. If the node's %s label was changed, put it back to that version "+
					"(kubectl label node %s %s=VERSION --overwrite), wait for that atelet to be Ready, then re-run",
					a.Atespace, a.Name, err, node.Name, fleet.VersionLabel, node.Name, fleet.VersionLabel)))
				mu.Unlock()
			default:
				mu.Lock()
				errs = append(errs, fmt.Errorf("suspend %s/%s: %w", a.Atespace, a.Name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// goingFirst orders actors so those on workers whose pod is Terminating
// (deleted by hand, say) come first, the earliest deletion first: each has
// until its eviction window ends, counted from the deletion request. It
// returns how many there are.
func goingFirst(f nodeFacts, actors []ateapi.Actor) ([]ateapi.Actor, int) {
	deleted := map[string]time.Time{}
	for _, p := range f.pods {
		if p.DeletionTimestamp != nil {
			deleted[string(p.UID)] = p.DeletionTimestamp.Add(-gracePeriod(p))
		}
	}
	if len(deleted) == 0 {
		return actors, 0
	}
	out := slices.Clone(actors)
	sort.SliceStable(out, func(i, j int) bool {
		ti, gi := deleted[out[i].Worker]
		tj, gj := deleted[out[j].Worker]
		if gi != gj {
			return gi
		}
		return gi && ti.Before(tj)
	})
	n := 0
	for _, a := range out {
		if _, ok := deleted[a.Worker]; ok {
			n++
		}
	}
	return out, n
}

// directHost reads worker (a pod's UID) directly and names what it hosts
// ("" for none, or no such worker: the pod never registered). A worker
// still ACTIVE is drained first, then read again.
func (e *evacuation) directHost(ctx context.Context, worker string) (string, error) {
	w, err := e.api.GetWorker(ctx, worker)
	if errors.Is(err, ateapi.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if w.State != ateapi.WorkerDraining {
		if _, err := e.api.DrainWorker(ctx, worker); err != nil && !errors.Is(err, ateapi.ErrNotFound) {
			return "", err
		}
		if w, err = e.api.GetWorker(ctx, worker); errors.Is(err, ateapi.ErrNotFound) {
			return "", nil
		} else if err != nil {
			return "", err
		}
	}
	switch {
	case len(w.Actors) > 0:
		return w.Actors[0].String(), nil
	case w.AllocatedActors > 0:
		return fmt.Sprintf("%d actor(s)", w.AllocatedActors), nil
	}
	return "", nil
}

// suspendPlan is what emptying a node does to its residents: suspend the
// live ones; a crashed one blocks until reverted.
func suspendPlan(live, crashed []ateapi.Actor) []runbook.Change {
	var out []runbook.Change
	for _, a := range live {
		out = append(out, runbook.Change{Object: "actor/" + a.Atespace + "/" + a.Name, Action: "SuspendActor", Detail: string(a.State)})
	}
	for _, a := range crashed {
		out = append(out, runbook.Change{Object: "actor/" + a.Atespace + "/" + a.Name, Action: "blocked",
			Detail: "CRASHED: needs RevertActor"})
	}
	return out
}

func describeCrashed(actors []ateapi.Actor) string {
	var names []string
	for _, a := range actors {
		s := a.Atespace + "/" + a.Name
		if a.CrashMessage != "" {
			s += " (" + a.CrashMessage + ")"
		}
		names = append(names, s)
	}
	sort.Strings(names)
	return fmt.Sprintf("%d CRASHED actor(s) on the node: %s", len(actors), strings.Join(names, ", "))
}

// hostsByWorker names, per worker, one actor it hosts: from the actor list
// and from the worker's own assignments. Worker pods are deleted only when
// their worker hosts nothing here (read right before the delete).
func hostsByWorker(inv *ateapi.Inventory) map[string]string {
	out := map[string]string{}
	for _, w := range inv.Workers {
		if len(w.Actors) > 0 {
			out[w.Name] = w.Actors[0].String()
		} else if w.AllocatedActors > 0 {
			out[w.Name] = fmt.Sprintf("%d actor(s)", w.AllocatedActors)
		}
	}
	for _, a := range inv.Actors {
		if a.Worker != "" && a.State != ateapi.ActorSuspended {
			out[a.Worker] = a.Ref().String()
		}
	}
	return out
}
