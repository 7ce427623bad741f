package fakesubstrate

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollbook/rollbook/pkg/atestate"
)

// Worker is a registered worker as the fake stores it. Name is the worker
// pod's UID. State and Version are server-owned: AddWorker defaults State to
// ACTIVE and Version to 1.
type Worker struct {
	Name         string
	Namespace    string
	Pool         string
	Pod          string
	Node         string
	IPs          []string
	SandboxClass string
	Labels       map[string]string
	// Capacity is the number of actors the worker may host; 0 means 1.
	Capacity int
	// CapacityPending: the worker registered but its ateom has not
	// reported its capacity yet (era D reports it unset); upstream it is
	// handed no actor until then.
	CapacityPending bool
	// Dataplane is the substrate version the worker's pool is pinned to:
	// only an atelet of that version checkpoints it ("" is any).
	Dataplane string
	State     atestate.WorkerState
	Version   int64
	Created   time.Time

	seq     uint64    // the server's change counter at the last change
	changed time.Time // when it last changed
}

// Actor is an actor as the fake stores it.
type Actor struct {
	Atespace string
	Name     string
	UID      string // defaults to "uid-<atespace>-<name>"
	State    atestate.ActorState
	Version  int64
	// Worker is the bound worker's name; empty when not bound.
	Worker string
	// AssignedNode pins a PAUSED/CRASHED actor to a node.
	AssignedNode        string
	SnapshotNodes       []string
	ExternalSnapshotURI string
	CrashMessage        string
	// WorkerSelector must be a subset of a worker's labels for ResumeActor.
	WorkerSelector map[string]string
	// CrashOnSuspend makes the next SuspendActor crash the actor (DataLoss).
	CrashOnSuspend bool

	seq     uint64
	changed time.Time
}

func (a *Actor) key() string { return a.Atespace + "/" + a.Name }

func (w *Worker) capacity() int {
	if w.Capacity <= 0 {
		return 1
	}
	return w.Capacity
}

func cloneWorker(w *Worker) Worker {
	c := *w
	c.IPs = slices.Clone(w.IPs)
	c.Labels = maps.Clone(w.Labels)
	return c
}

func cloneActor(a *Actor) Actor {
	c := *a
	c.SnapshotNodes = slices.Clone(a.SnapshotNodes)
	c.WorkerSelector = maps.Clone(a.WorkerSelector)
	return c
}

// sortedWorkers and sortedActors keep their order until the set of names
// changes (names never change), so paging through a big inventory does not
// sort it again for every page. Callers hold s.mu.
func (s *Server) sortedWorkers() []*Worker {
	if s.workerOrder == nil {
		s.workerOrder = slices.Collect(maps.Values(s.workers))
		sort.Slice(s.workerOrder, func(i, j int) bool { return s.workerOrder[i].Name < s.workerOrder[j].Name })
	}
	return s.workerOrder
}

func (s *Server) sortedActors(atespace string) []*Actor {
	if s.actorOrder == nil {
		s.actorOrder = slices.Collect(maps.Values(s.actors))
		sort.Slice(s.actorOrder, func(i, j int) bool { return s.actorOrder[i].key() < s.actorOrder[j].key() })
	}
	if atespace == "" {
		return s.actorOrder
	}
	var out []*Actor
	for _, a := range s.actorOrder {
		if a.Atespace == atespace {
			out = append(out, a)
		}
	}
	return out
}

// actorsOn returns the actors bound to a worker, by key; callers hold s.mu.
// It reads an index built once per change of a binding (setWorker, AddActor),
// so encoding thousands of workers does not scan every actor per worker.
func (s *Server) actorsOn(worker string) []*Actor {
	if s.bound == nil {
		s.bound = map[string][]*Actor{}
		for _, a := range s.sortedActors("") {
			if a.Worker != "" {
				s.bound[a.Worker] = append(s.bound[a.Worker], a)
			}
		}
	}
	return s.bound[worker]
}

// setWorker binds a to worker ("" unbinds); callers hold s.mu.
func (s *Server) setWorker(a *Actor, worker string) {
	a.Worker = worker
	s.bound = nil
}

// AddWorker registers a worker (the syncer's CreateWorker).
func (s *Server) AddWorker(w Worker) error {
	if w.Name == "" {
		return fmt.Errorf("fakesubstrate: worker name (pod UID) is required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.workers[w.Name]; ok {
		return fmt.Errorf("fakesubstrate: worker %s already exists", w.Name)
	}
	c := cloneWorker(&w)
	if c.State == "" {
		c.State = atestate.WorkerActive
	}
	if c.Version == 0 {
		c.Version = 1
	}
	if c.Created.IsZero() {
		c.Created = s.now()
	}
	s.seq++
	c.seq, c.changed = s.seq, s.now()
	s.workers[c.Name] = &c
	s.workerOrder = nil
	return nil
}

// MarkWorkerDraining drains a worker (the syncer on a deletionTimestamp).
// It is idempotent and leaves bound actors alone.
func (s *Server) MarkWorkerDraining(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[name]
	if !ok {
		return fmt.Errorf("fakesubstrate: worker %s not found", name)
	}
	s.drainLocked(w)
	return nil
}

// ReportCapacity ends a worker's CapacityPending: its ateom reported.
func (s *Server) ReportCapacity(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[name]
	if !ok {
		return fmt.Errorf("fakesubstrate: worker %s not found", name)
	}
	if w.CapacityPending {
		w.CapacityPending = false
		s.touchWorker(w)
	}
	return nil
}

func (s *Server) drainLocked(w *Worker) {
	if w.State != atestate.WorkerDraining {
		w.State = atestate.WorkerDraining
		s.touchWorker(w)
	}
}

// CrashActorsOnWorker models the end of the eviction window: every actor
// bound to the worker that is not SUSPENDED becomes CRASHED, loses its
// assignment and keeps its node. It returns the crashed actors.
func (s *Server) CrashActorsOnWorker(name string) []ActorRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashOnLocked(name)
}

// LoseActorsOnWorker is CrashActorsOnWorker when the worker's ateom exited
// (why) while the worker is still registered: its sandboxes are gone.
func (s *Server) LoseActorsOnWorker(name, why string) []ActorRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashWhyLocked(name, why)
}

// AwakeOn names the actors bound to the worker that are not SUSPENDED:
// the ones its ateom's exit would lose.
func (s *Server) AwakeOn(name string) []ActorRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ActorRef
	for _, a := range s.actorsOn(name) {
		if a.State != atestate.ActorSuspended {
			out = append(out, ActorRef{Atespace: a.Atespace, Name: a.Name})
		}
	}
	return out
}

func (s *Server) crashOnLocked(name string) []ActorRef {
	return s.crashWhyLocked(name, "")
}

func (s *Server) crashWhyLocked(name, why string) []ActorRef {
	var crashed []ActorRef
	node := ""
	if w, ok := s.workers[name]; ok {
		node = w.Node
	}
	for _, a := range s.actorsOn(name) {
		if a.State == atestate.ActorSuspended {
			s.setWorker(a, "")
			continue
		}
		a.CrashMessage = fmt.Sprintf("worker %s was deleted while the actor was %s", name, a.State)
		if why != "" {
			a.CrashMessage = fmt.Sprintf("%s while the actor was %s", why, a.State)
		}
		a.State = atestate.ActorCrashed
		s.setWorker(a, "")
		if node != "" {
			a.AssignedNode = node
		}
		s.touch(a)
		s.lost(a)
		crashed = append(crashed, ActorRef{Atespace: a.Atespace, Name: a.Name})
	}
	return crashed
}

// RemoveWorker is the syncer's DeleteWorker when the pod is gone: drain,
// crash every bound actor that is not SUSPENDED, then forget the worker.
func (s *Server) RemoveWorker(name string) ([]ActorRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[name]
	if !ok {
		return nil, fmt.Errorf("fakesubstrate: worker %s not found", name)
	}
	s.drainLocked(w)
	crashed := s.crashOnLocked(name)
	delete(s.workers, name)
	s.workerOrder = nil
	return crashed, nil
}

// AddActor stores an actor. A bound actor's worker must exist.
func (s *Server) AddActor(a Actor) error {
	if a.Atespace == "" || a.Name == "" {
		return fmt.Errorf("fakesubstrate: actor atespace and name are required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.actors[a.key()]; ok {
		return fmt.Errorf("fakesubstrate: actor %s already exists", a.key())
	}
	if a.Worker != "" {
		w, ok := s.workers[a.Worker]
		if !ok {
			return fmt.Errorf("fakesubstrate: actor %s: worker %s not found", a.key(), a.Worker)
		}
		if a.AssignedNode == "" {
			a.AssignedNode = w.Node
		}
	}
	c := cloneActor(&a)
	if c.UID == "" {
		c.UID = "uid-" + a.Atespace + "-" + a.Name
	}
	if c.State == "" {
		c.State = atestate.ActorSuspended
	}
	if c.Version == 0 {
		c.Version = 1
	}
	s.seq++
	c.seq, c.changed = s.seq, s.now()
	s.actors[c.key()] = &c
	s.bound, s.actorOrder = nil, nil
	return nil
}

// SetActorState forces an actor's state, for scenario setup.
func (s *Server) SetActorState(atespace, name string, st atestate.ActorState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.actors[atespace+"/"+name]
	if !ok {
		return fmt.Errorf("fakesubstrate: actor %s/%s not found", atespace, name)
	}
	a.State = st
	s.touch(a)
	return nil
}

// SetAteletUp marks a node's atelet reachable or not. Suspending a PAUSED
// actor whose snapshot node has no atelet answers Unavailable, which models
// "suspend before the label flip".
func (s *Server) SetAteletUp(node string, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if up {
		delete(s.ateletDown, node)
	} else {
		s.ateletDown[node] = true
	}
}

// SetAtelets says which substrate versions have a Ready atelet on node. Once
// a node is reported, suspending an actor bound to a worker there needs an
// atelet of the worker's version: upstream the suspend checkpoints through
// the atelet of the worker's node.
func (s *Server) SetAtelets(node string, versions []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.atelets == nil {
		s.atelets = map[string][]string{}
	}
	s.atelets[node] = slices.Clone(versions)
}

// checkpointerLocked refuses a suspend of an actor bound to w when no Ready
// atelet on w's node serves w's version.
func (s *Server) checkpointerLocked(w *Worker) error {
	vs, known := s.atelets[w.Node]
	if !known || (w.Dataplane == "" && len(vs) > 0) || slices.Contains(vs, w.Dataplane) {
		return nil
	}
	return status.Errorf(codes.Unavailable, "atelet on node %s is unreachable", w.Node)
}

// Workers returns a copy of every worker, sorted by name.
func (s *Server) Workers() []Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Worker
	for _, w := range s.sortedWorkers() {
		out = append(out, cloneWorker(w))
	}
	return out
}

// Actors returns a copy of every actor, sorted by atespace/name.
func (s *Server) Actors() []Actor {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Actor
	for _, a := range s.sortedActors("") {
		out = append(out, cloneActor(a))
	}
	return out
}

// GetActor returns a copy of one actor.
func (s *Server) GetActor(atespace, name string) (Actor, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.actors[atespace+"/"+name]
	if !ok {
		return Actor{}, false
	}
	return cloneActor(a), true
}

// touch records a change of a: a new version, and the change counter soft
// lists compare against. Callers hold s.mu.
func (s *Server) touch(a *Actor) {
	a.Version++
	s.seq++
	a.seq, a.changed = s.seq, s.now()
}

func (s *Server) touchWorker(w *Worker) {
	if w.Version == 0 {
		w.Version = 1
	} else {
		w.Version++
	}
	s.seq++
	w.seq, w.changed = s.seq, s.now()
}

// lost reports an actor that just lost its state (CRASHED). Callers hold s.mu.
func (s *Server) lost(a *Actor) {
	if s.opts.OnLost != nil {
		s.opts.OnLost(ActorRef{Atespace: a.Atespace, Name: a.Name}, a.CrashMessage)
	}
}

// LoseLocalSnapshots models a node whose atelet was replaced (its version
// label flipped): the local snapshots it held are gone, so every actor still
// PAUSED there (or suspending from PAUSED, with no worker) is lost and
// becomes CRASHED. It returns those actors.
func (s *Server) LoseLocalSnapshots(node string) []ActorRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ActorRef
	for _, a := range s.sortedActors("") {
		if a.Worker != "" || !slices.Contains(a.SnapshotNodes, node) {
			continue
		}
		if a.State != atestate.ActorPaused && a.State != atestate.ActorSuspending {
			continue
		}
		a.CrashMessage = fmt.Sprintf("local snapshot lost: the atelet on node %s was replaced while the actor was %s there", node, a.State)
		a.State = atestate.ActorCrashed
		a.AssignedNode = node
		a.SnapshotNodes = nil
		s.touch(a)
		s.lost(a)
		out = append(out, ActorRef{Atespace: a.Atespace, Name: a.Name})
	}
	return out
}
