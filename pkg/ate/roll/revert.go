package roll

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RevertRunbookName names the runbook behind kubectl ate revert.
const RevertRunbookName = "ate-revert"

// RevertAPI is the part of the substrate client reverting uses.
type RevertAPI interface {
	fleet.Inventorier
	Capabilities() ateapi.Capabilities
	GetActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
	RevertActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
}

// ActorTarget is one actor as a runbook target. Actors are no Kubernetes
// objects: events about them go to the control API's Service.
type ActorTarget struct {
	Actor ateapi.ActorRef
}

// Name implements runbook.Target.
func (t ActorTarget) Name() string { return "actor/" + t.Actor.String() }

// Ref implements runbook.Target.
func (t ActorTarget) Ref() corev1.ObjectReference { return apiRef() }

// Annotation implements runbook.Target; an actor keeps no step clock.
func (t ActorTarget) Annotation(context.Context, string) (string, bool, error) { return "", false, nil }

// SetAnnotation implements runbook.Target; an actor keeps no step clock.
func (t ActorTarget) SetAnnotation(context.Context, string, *string) error {
	return fmt.Errorf("%s keeps no step clock: its steps must not have a timeout", t.Name())
}

func apiRef() corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: fleet.Namespace, Name: ateapi.DefaultService}
}

// revertFacts is one actor as the revert step sees it.
type revertFacts struct {
	actor ateapi.Actor
	caps  ateapi.Capabilities
}

// crashed reports an actor the revert has not finished with.
func (f revertFacts) crashed() bool {
	return f.actor.State == ateapi.ActorCrashed || f.actor.State == ateapi.ActorReverting
}

// RevertRunbook returns CRASHED actors to SUSPENDED at their last external
// snapshot; limit bounds how long one actor may take. Run it on ActorTargets.
func RevertRunbook(api RevertAPI, rec kube.Recorder, limit time.Duration) *runbook.Runbook[revertFacts] {
	return &runbook.Runbook[revertFacts]{
		Name:  RevertRunbookName,
		Title: "Return CRASHED actors to SUSPENDED at their last external snapshot",
		Doc: `A CRASHED actor (its worker pod went away while it was awake) refuses resume and suspend.
RevertActor discards the crashed run and returns the actor to SUSPENDED at its last external
snapshot, from which it resumes on demand. Everything the actor did since that snapshot is
lost, so the command asks for confirmation (or --yes) before this runbook runs.`,
		Observe: func(ctx context.Context, t runbook.Target) (revertFacts, error) {
			at, ok := t.(ActorTarget)
			if !ok {
				return revertFacts{}, fmt.Errorf("%s is not an actor", t.Name())
			}
			a, err := api.GetActor(ctx, at.Actor.Atespace, at.Actor.Name)
			return revertFacts{actor: a, caps: api.Capabilities()}, err
		},
		Steps: []runbook.Step[revertFacts]{{
			ID: "ate.actor.revert", Title: "Revert the crashed actor",
			Doc: "Call RevertActor, then watch the actor pass through REVERTING to SUSPENDED. Done once the actor is no longer " +
				"CRASHED or REVERTING: an actor that is RUNNING or SUSPENDED has nothing to revert.",
			Done: func(f revertFacts) (bool, string) {
				if f.crashed() {
					return false, string(f.actor.State)
				}
				return true, string(f.actor.State) + ", not CRASHED: nothing to revert"
			},
			Guards: []runbook.Guard[revertFacts]{{Name: "the control API serves RevertActor", Check: func(f revertFacts) (bool, string) {
				return f.caps.Has("RevertActor"), fmt.Sprintf("era %s: a crashed actor can only be deleted on this install", f.caps.Era)
			}}},
			Plan: func(f revertFacts) []runbook.Change {
				return []runbook.Change{{Object: "actor/" + f.actor.Ref().String(), Action: "revert", Detail: RevertLoss(f.actor)}}
			},
			Act: func(ctx context.Context, f revertFacts) error {
				_, err := api.RevertActor(ctx, f.actor.Atespace, f.actor.Name)
				var ae *ateapi.Error
				if errors.As(err, &ae) && (ae.ActorState == ateapi.ActorSuspended || ae.ActorState == ateapi.ActorReverting) {
					return nil // an earlier call got there: the wait confirms it
				}
				if err != nil {
					return err
				}
				rec.Record(ctx, apiRef(), true, "ActorReverted", fmt.Sprintf("reverted CRASHED actor %s: %s", f.actor.Ref(),
					RevertLoss(f.actor)))
				return nil
			},
			Wait: func(ctx context.Context, f revertFacts) error {
				last := f.actor.State
				// The substrate has no watch: poll.
				err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
					a, err := api.GetActor(ctx, f.actor.Atespace, f.actor.Name)
					last = a.State
					return err == nil && !(revertFacts{actor: a}).crashed(), err
				})
				if wait.Interrupted(err) && ctx.Err() == nil {
					return fmt.Errorf("actor %s still %s after %s", f.actor.Ref(), last, limit)
				}
				return err
			},
		}},
	}
}

// RevertLoss says what reverting a costs: the snapshot the actor goes back to.
func RevertLoss(a ateapi.Actor) string {
	to := "back to " + a.ExternalSnapshotURI
	if a.ExternalSnapshotURI == "" {
		to = "no external snapshot of its own: back to the golden snapshot it started from"
	}
	if a.CrashMessage != "" {
		to += " (crashed: " + a.CrashMessage + ")"
	}
	return to + "; its work since then is lost"
}

// CrashedActors lists the CRASHED actors, of atespace when not "".
func CrashedActors(ctx context.Context, api fleet.Inventorier, atespace string) ([]ateapi.Actor, error) {
	inv, err := api.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	var out []ateapi.Actor
	for _, a := range inv.Actors {
		if a.State == ateapi.ActorCrashed && (atespace == "" || a.Atespace == atespace) {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref().String() < out[j].Ref().String() })
	return out, nil
}
