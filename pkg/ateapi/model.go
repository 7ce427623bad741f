package ateapi

import "github.com/rollbook/rollbook/pkg/atestate"

// The states are pkg/atestate's, shared with the fake substrate; they are
// re-exported because every caller of this client reads them from here.

// WorkerState is a worker's lifecycle state, independent of era spelling.
type WorkerState = atestate.WorkerState

// ActorState is an actor's lifecycle state, independent of era spelling.
type ActorState = atestate.ActorState

// Worker states.
const (
	WorkerUnspecified = atestate.WorkerUnspecified
	WorkerActive      = atestate.WorkerActive
	WorkerDraining    = atestate.WorkerDraining
	WorkerOffline     = atestate.WorkerOffline
)

// Actor states.
const (
	ActorUnspecified = atestate.ActorUnspecified
	ActorResuming    = atestate.ActorResuming
	ActorRunning     = atestate.ActorRunning
	ActorSuspending  = atestate.ActorSuspending
	ActorSuspended   = atestate.ActorSuspended
	ActorPausing     = atestate.ActorPausing
	ActorPaused      = atestate.ActorPaused
	ActorCrashed     = atestate.ActorCrashed
	ActorDeleting    = atestate.ActorDeleting
	ActorReverting   = atestate.ActorReverting
)

// ActorRef names an actor.
type ActorRef struct {
	Atespace string `json:"atespace"`
	Name     string `json:"name"`
}

func (r ActorRef) String() string { return r.Atespace + "/" + r.Name }

// Worker is a registered worker. Name is the worker pod's UID (the syncer
// names workers after it), which is what DrainWorker takes.
type Worker struct {
	Name         string            `json:"name"`
	Namespace    string            `json:"namespace,omitempty"`
	Pool         string            `json:"pool,omitempty"`
	Pod          string            `json:"pod,omitempty"`
	PodUID       string            `json:"podUID,omitempty"`
	Node         string            `json:"node,omitempty"`
	IPs          []string          `json:"ips,omitempty"`
	SandboxClass string            `json:"sandboxClass,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	State        WorkerState       `json:"state"`
	Version      int64             `json:"version,omitempty"`
	// Actors bound to this worker: from the worker's assignment (eras B/C),
	// from ListWorkerActorAssignments (era D), or filled in by Resolve.
	Actors []ActorRef `json:"actors,omitempty"`
	// CapacityActors/AllocatedActors exist from era D on; 0 capacity means unset.
	CapacityActors  int `json:"capacityActors,omitempty"`
	AllocatedActors int `json:"allocatedActors,omitempty"`
	// Slots: the era counts a worker's room in actor slots (era D: it
	// has status.capacity), so an unset capacity is a worker whose ateom
	// has not reported yet, not one slot.
	Slots bool `json:"slots,omitempty"`
	// Down, when set, says why the worker cannot serve whatever the
	// substrate says (its pod Failed, Terminating or not Ready, its node
	// NotReady): the substrate keeps such a worker ACTIVE until the pod is
	// deleted. It is then neither serving nor free.
	Down string `json:"down,omitempty"`
}

// PoolKey is "namespace/pool": pool names repeat across namespaces, so a
// worker's pool is only ever matched by this key.
func (w Worker) PoolKey() string { return w.Namespace + "/" + w.Pool }

// Hosts reports whether the worker itself says it hosts an actor: its
// assignment (eras B/C), its assignments or allocated count (era D). It is
// the cross-check of an actor list that may have missed an actor.
func (w Worker) Hosts() bool { return len(w.Actors) > 0 || w.AllocatedActors > 0 }

// Serving reports whether the worker takes actors at all: ACTIVE, and in
// era D with its capacity reported (until its ateom reports it, upstream
// hands it no actor).
func (w Worker) Serving() bool {
	return w.State == WorkerActive && w.Down == "" && (!w.Slots || w.CapacityActors > 0)
}

// Free reports whether the worker can take another actor.
func (w Worker) Free() bool { return w.FreeSlots() > 0 }

// FreeSlots is how many more actors the worker can take: none unless
// ACTIVE; before era D one while it hosts none; in era D its reported
// capacity minus its allocation, and none while the capacity is unset
// (upstream such a worker waits for its ateom's capacity report before it
// is handed an actor).
func (w Worker) FreeSlots() int {
	if w.State != WorkerActive || w.Down != "" {
		return 0
	}
	used := max(len(w.Actors), w.AllocatedActors)
	if !w.Slots {
		return max(0, 1-used)
	}
	return max(0, w.CapacityActors-used)
}

// Actor is an actor and where it lives.
type Actor struct {
	Atespace string     `json:"atespace"`
	Name     string     `json:"name"`
	UID      string     `json:"uid,omitempty"`
	Version  int64      `json:"version,omitempty"`
	State    ActorState `json:"state"`
	// Worker is the worker name (pod UID) the actor is bound to, if any.
	Worker string `json:"worker,omitempty"`
	Pool   string `json:"pool,omitempty"`
	Pod    string `json:"pod,omitempty"`
	// Node is the node of the bound worker, else the node the actor is pinned
	// to (assigned_node, kept on PAUSED and CRASHED actors).
	Node         string `json:"node,omitempty"`
	AssignedNode string `json:"assignedNode,omitempty"`
	// SnapshotNodes hold the actor's local (paused) snapshot.
	SnapshotNodes       []string `json:"snapshotNodes,omitempty"`
	ExternalSnapshotURI string   `json:"externalSnapshotURI,omitempty"`
	CrashMessage        string   `json:"crashMessage,omitempty"`
}

// Ref returns the actor's reference.
func (a Actor) Ref() ActorRef { return ActorRef{Atespace: a.Atespace, Name: a.Name} }

// OnNode reports whether the actor is bound to, pinned to, or holds a local
// snapshot on node: the runbook's "residents" union for one actor.
func (a Actor) OnNode(node string) bool {
	if node == "" {
		return false
	}
	if a.Node == node || a.AssignedNode == node {
		return true
	}
	for _, n := range a.SnapshotNodes {
		if n == node {
			return true
		}
	}
	return false
}
