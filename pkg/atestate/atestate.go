// Package atestate names the Agent Substrate's actor and worker lifecycle
// states: the upstream enum value names with their era prefix dropped
// (ACTOR_STATE_RUNNING and STATUS_RUNNING are both "RUNNING"). It is the one
// vocabulary shared by the substrate client (pkg/ateapi) and the fake
// substrate that tests it (internal/fakesubstrate), so the fake need not
// import the client it tests; it holds no behaviour of either.
package atestate

import "strings"

// WorkerState is a worker's lifecycle state, independent of era spelling
// (STATE_DRAINING, WORKER_STATE_DRAINING).
type WorkerState string

// Worker states.
const (
	WorkerUnspecified WorkerState = "UNSPECIFIED"
	WorkerActive      WorkerState = "ACTIVE"
	WorkerDraining    WorkerState = "DRAINING"
	WorkerOffline     WorkerState = "OFFLINE"
)

// ActorState is an actor's lifecycle state, independent of era spelling
// (STATUS_RUNNING, ACTOR_STATE_RUNNING).
type ActorState string

// Actor states.
const (
	ActorUnspecified ActorState = "UNSPECIFIED"
	ActorResuming    ActorState = "RESUMING"
	ActorRunning     ActorState = "RUNNING"
	ActorSuspending  ActorState = "SUSPENDING"
	ActorSuspended   ActorState = "SUSPENDED"
	ActorPausing     ActorState = "PAUSING"
	ActorPaused      ActorState = "PAUSED"
	ActorCrashed     ActorState = "CRASHED"
	ActorDeleting    ActorState = "DELETING"
	ActorReverting   ActorState = "REVERTING"
)

var actorStates = []ActorState{ActorResuming, ActorRunning, ActorSuspending, ActorSuspended,
	ActorPausing, ActorPaused, ActorCrashed, ActorDeleting, ActorReverting, ActorUnspecified}

var workerStates = []WorkerState{WorkerActive, WorkerDraining, WorkerOffline, WorkerUnspecified}

// ParseActorState maps any era's enum name to an ActorState by suffix; an
// unknown name is kept verbatim so it still prints.
func ParseActorState(enumName string) ActorState {
	return parse(enumName, actorStates, ActorUnspecified)
}

// ParseWorkerState maps any era's enum name to a WorkerState by suffix.
func ParseWorkerState(enumName string) WorkerState {
	return parse(enumName, workerStates, WorkerUnspecified)
}

func parse[S ~string](enumName string, states []S, unspecified S) S {
	for _, s := range states {
		if enumName == string(s) || strings.HasSuffix(enumName, "_"+string(s)) {
			return s
		}
	}
	if enumName == "" {
		return unspecified
	}
	return S(enumName)
}

// Transient reports a state an actor leaves on its own (a suspend refused
// in it is worth retrying).
func (s ActorState) Transient() bool {
	switch s {
	case ActorResuming, ActorSuspending, ActorPausing, ActorReverting:
		return true
	}
	return false
}
