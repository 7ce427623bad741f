package fakesubstrate

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollbook/rollbook/pkg/atestate"
)

// The control API's RPC semantics, shared by the gRPC handlers and the
// exported methods the simulator calls. Callers hold s.mu.

func (s *Server) findActorLocked(atespace, name string) (*Actor, error) {
	if atespace == "" || name == "" {
		return nil, status.Error(codes.InvalidArgument, "actor atespace and name are required")
	}
	a, ok := s.actors[atespace+"/"+name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Actor %s/%s not found", atespace, name)
	}
	return a, nil
}

// stateName spells a state the way this era's enum does, for error texts.
func (s *Server) stateName(st atestate.ActorState) string {
	if s.era == EraB2 {
		return "STATUS_" + string(st)
	}
	return "ACTOR_STATE_" + string(st)
}

func (s *Server) suspendLocked(a *Actor) error {
	switch a.State {
	case atestate.ActorSuspended:
		return nil
	case atestate.ActorSuspending:
		if s.opts.TransitionTime > 0 {
			return nil // in progress; the timer finishes it
		}
	case atestate.ActorRunning, atestate.ActorPaused:
	default:
		return status.Errorf(codes.FailedPrecondition,
			"MarkSuspending prerequisite not met for actor %s (got: %s, want RUNNING or PAUSED)",
			a.key(), s.stateName(a.State))
	}
	if w, ok := s.workers[a.Worker]; ok && a.State == atestate.ActorRunning {
		if err := s.checkpointerLocked(w); err != nil {
			return err
		}
	}
	if a.State == atestate.ActorPaused {
		for _, n := range a.SnapshotNodes {
			if s.ateletDown[n] {
				return status.Errorf(codes.Unavailable, "atelet on node %s is unreachable", n)
			}
		}
	}
	if a.CrashOnSuspend {
		a.CrashOnSuspend = false
		s.crashActorLocked(a, "checkpoint failed during suspend")
		return status.Errorf(codes.DataLoss, "actor %s crashed", a.key())
	}
	if d := s.opts.TransitionTime; d > 0 && a.State != atestate.ActorSuspending {
		// The snapshot upload takes time: SUSPENDING keeps the worker (or
		// the local snapshot) until it finishes.
		a.State = atestate.ActorSuspending
		s.touch(a)
		s.later(d, a, atestate.ActorSuspending, func() { s.finishSuspendLocked(a) })
		return nil
	}
	s.finishSuspendLocked(a)
	return nil
}

func (s *Server) finishSuspendLocked(a *Actor) {
	a.State = atestate.ActorSuspended
	s.setWorker(a, "")
	a.AssignedNode = ""
	a.SnapshotNodes = nil
	s.touch(a)
	a.ExternalSnapshotURI = fmt.Sprintf("gs://fake-snapshots/%s/v%d", a.key(), a.Version)
}

// later runs f (under s.mu) after d if a is still in state st with the
// version it has now, then tells OnChange.
func (s *Server) later(d time.Duration, a *Actor, st atestate.ActorState, f func()) {
	v := a.Version
	time.AfterFunc(d, func() {
		s.mu.Lock()
		ok := a.State == st && a.Version == v
		if ok {
			f()
		}
		s.mu.Unlock()
		if ok && s.opts.OnChange != nil {
			s.opts.OnChange()
		}
	})
}

func (s *Server) crashActorLocked(a *Actor, msg string) {
	if w, ok := s.workers[a.Worker]; ok {
		a.AssignedNode = w.Node
	}
	a.State = atestate.ActorCrashed
	a.CrashMessage = msg
	s.setWorker(a, "")
	s.touch(a)
	s.lost(a)
}

func (s *Server) revertLocked(a *Actor) error {
	switch a.State {
	case atestate.ActorRunning, atestate.ActorPaused, atestate.ActorCrashed, atestate.ActorReverting:
	default:
		return status.Errorf(codes.FailedPrecondition,
			"actor %s is not in a revertable state (got: %s)", a.key(), s.stateName(a.State))
	}
	a.State = atestate.ActorSuspended
	s.setWorker(a, "")
	a.AssignedNode = ""
	a.SnapshotNodes = nil
	a.CrashMessage = ""
	s.touch(a)
	return nil
}

// resumeLocked binds a SUSPENDED or PAUSED actor to an ACTIVE worker with
// room; it reports false for an actor that is already RUNNING.
func (s *Server) resumeLocked(a *Actor) (bool, error) {
	switch a.State {
	case atestate.ActorRunning:
		return false, nil
	case atestate.ActorSuspended, atestate.ActorPaused:
	default:
		return false, status.Errorf(codes.FailedPrecondition,
			"AssignWorker prerequisite not met for actor %s (got: %s)", a.key(), s.stateName(a.State))
	}
	var fits []*Worker
	for _, w := range s.sortedWorkers() {
		if s.canHostLocked(w, a) {
			fits = append(fits, w)
		}
	}
	if len(fits) == 0 {
		return false, status.Error(codes.ResourceExhausted, "no free workers available")
	}
	w := fits[0]
	if s.rand != nil {
		w = fits[s.rand.Intn(len(fits))]
	}
	a.State = atestate.ActorRunning
	s.setWorker(a, w.Name)
	a.AssignedNode = w.Node
	a.SnapshotNodes = nil
	if d := s.opts.TransitionTime; d > 0 {
		// Bound to its worker at once (it holds the slot), RUNNING once the
		// restore finishes; suspend refuses it meanwhile.
		a.State = atestate.ActorResuming
		s.touch(a)
		s.later(d, a, atestate.ActorResuming, func() { a.State = atestate.ActorRunning; s.touch(a) })
		return true, nil
	}
	s.touch(a)
	return true, nil
}

func (s *Server) canHostLocked(w *Worker, a *Actor) bool {
	if w.State != atestate.WorkerActive || w.CapacityPending || len(s.actorsOn(w.Name)) >= w.capacity() {
		return false
	}
	// A resume restores through the atelet of the worker's node: none
	// serves the worker's version there (the new one still Pending after
	// a flip, say) means no placement.
	if s.checkpointerLocked(w) != nil {
		return false
	}
	for k, v := range a.WorkerSelector {
		if w.Labels[k] != v {
			return false
		}
	}
	// A paused actor's state is on its snapshot nodes only.
	return a.State != atestate.ActorPaused || slices.Contains(a.SnapshotNodes, w.Node)
}

// ResumeActor resumes an actor onto a free worker, as the router does on
// traffic. It returns the actor and whether it was newly placed.
func (s *Server) ResumeActor(atespace, name string) (Actor, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.findActorLocked(atespace, name)
	if err != nil {
		return Actor{}, false, err
	}
	resumed, err := s.resumeLocked(a)
	return cloneActor(a), resumed, err
}

// SuspendActor suspends an actor as the RPC does (for actors that
// self-suspend on SIGTERM in the simulator).
func (s *Server) SuspendActor(atespace, name string) (Actor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.findActorLocked(atespace, name)
	if err != nil {
		return Actor{}, err
	}
	err = s.suspendLocked(a)
	return cloneActor(a), err
}

// Resumable lists the SUSPENDED or PAUSED actors that some worker could host
// right now, for the simulator's router.
func (s *Server) Resumable() []ActorRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ActorRef
	for _, a := range s.sortedActors("") {
		if a.State != atestate.ActorSuspended && a.State != atestate.ActorPaused {
			continue
		}
		for _, w := range s.workers {
			if s.canHostLocked(w, a) {
				out = append(out, ActorRef{Atespace: a.Atespace, Name: a.Name})
				break
			}
		}
	}
	return out
}
