package fakesubstrate

// States as the fake stores them. Values are the enum-name suffixes every
// era shares (ACTOR_STATE_RUNNING, STATUS_RUNNING → "RUNNING"); the fake
// deliberately does not import the client package it tests.

// ActorState is an actor's state.
type ActorState string

// Actor states.
const (
	ActorResuming   ActorState = "RESUMING"
	ActorRunning    ActorState = "RUNNING"
	ActorSuspending ActorState = "SUSPENDING"
	ActorSuspended  ActorState = "SUSPENDED"
	ActorPausing    ActorState = "PAUSING"
	ActorPaused     ActorState = "PAUSED"
	ActorCrashed    ActorState = "CRASHED"
	ActorDeleting   ActorState = "DELETING"
	ActorReverting  ActorState = "REVERTING"
)

// WorkerState is a worker's state.
type WorkerState string

// Worker states.
const (
	WorkerActive   WorkerState = "ACTIVE"
	WorkerDraining WorkerState = "DRAINING"
)

// ActorRef names an actor.
type ActorRef struct{ Atespace, Name string }
