package atestate

import "testing"

func TestParseEverySpelling(t *testing.T) {
	for in, want := range map[string]ActorState{
		"ACTOR_STATE_RUNNING": ActorRunning, // era C on
		"STATUS_SUSPENDED":    ActorSuspended,
		"PAUSED":              ActorPaused,
		"":                    ActorUnspecified,
		"ACTOR_STATE_NEW":     "ACTOR_STATE_NEW", // unknown: kept so it prints
	} {
		if got := ParseActorState(in); got != want {
			t.Errorf("ParseActorState(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]WorkerState{
		"WORKER_STATE_DRAINING": WorkerDraining,
		"STATE_ACTIVE":          WorkerActive,
		"":                      WorkerUnspecified,
	} {
		if got := ParseWorkerState(in); got != want {
			t.Errorf("ParseWorkerState(%q) = %q, want %q", in, got, want)
		}
	}
}
