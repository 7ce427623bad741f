package roll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// PinPoolsRunbookName names the runbook behind preflight --pin-pools.
const PinPoolsRunbookName = "ate-pin-pools"

// pinFacts is the cluster as the pin step sees it.
type pinFacts struct {
	c *fleet.Cluster
	// unpinned are the serving pools without a version pin; bound are the
	// actors bound to one of their workers.
	unpinned []fleet.Pool
	bound    []ateapi.Actor
	inv      *ateapi.Inventory
}

// PinAPI is what pinning reads and does on the substrate.
type PinAPI interface {
	fleet.Inventorier
	DrainWorker(ctx context.Context, name string) (ateapi.Worker, error)
}

// pinWorkers are the registered workers of pools not yet draining.
func pinWorkers(inv *ateapi.Inventory, pools []fleet.Pool) []ateapi.Worker {
	set := fleet.PoolSet(pools)
	var out []ateapi.Worker
	for _, w := range inv.Workers {
		if set[w.PoolKey()] && w.State != ateapi.WorkerDraining {
			out = append(out, w)
		}
	}
	return out
}

// pinBlockers are the actors on the pools' workers: bound by the actor
// list, or named by a worker (a soft list may miss one that just moved).
func pinBlockers(inv *ateapi.Inventory, pools []fleet.Pool) []ateapi.Actor {
	out := fleet.ActorsBoundTo(inv, pools)
	seen := map[ateapi.ActorRef]bool{}
	for _, a := range out {
		seen[a.Ref()] = true
	}
	set := fleet.PoolSet(pools)
	for _, w := range inv.Workers {
		if !set[w.PoolKey()] {
			continue
		}
		for _, r := range w.Actors {
			if !seen[r] {
				seen[r] = true
				out = append(out, ateapi.Actor{Atespace: r.Atespace, Name: r.Name, Worker: w.Name})
			}
		}
	}
	return out
}

// PinPoolsRunbook pins every unpinned serving pool to OLD, only while no
// actor is bound to its workers. Run it on runbook.ScopeTarget{Scope: "pools"}.
func PinPoolsRunbook(cs kubernetes.Interface, dyn dynamic.Interface, api PinAPI, rec kube.Recorder) *runbook.Runbook[pinFacts] {
	return &runbook.Runbook[pinFacts]{
		Name:  PinPoolsRunbookName,
		Title: "Pin every serving WorkerPool to OLD",
		Doc: `The runbook's precondition that every serving pool is pinned to OLD, made true: a pool
without a version pin gets ` + "`spec.template.nodeSelector`" + ` set to OLD, so its workers stay
on nodes at OLD while the roll moves the others. The edit re-renders the pool's Deployment,
which would roll its workers through live actors, so a pool is pinned only while no actor is
bound to one of its workers. An actor could be placed between that check and the edit, so the
pool's workers are drained first (the edit replaces every one of them anyway) and the check is
made again after the drain, when no actor can be placed there any more.`,
		Observe: func(ctx context.Context, _ runbook.Target) (pinFacts, error) {
			c, err := fleet.ObserveCluster(ctx, cs, dyn)
			if err != nil {
				return pinFacts{}, err
			}
			f := pinFacts{c: c}
			for _, p := range c.ServingPools() {
				if p.Pin == "" {
					f.unpinned = append(f.unpinned, p)
				}
			}
			if len(f.unpinned) == 0 {
				return f, nil
			}
			inv, err := api.Inventory(ctx)
			if err != nil {
				return f, fmt.Errorf("the control API must show that no actor is on a pool's workers before it is pinned: %w", err)
			}
			f.inv, f.bound = inv, pinBlockers(inv, f.unpinned)
			return f, nil
		},
		Steps: []runbook.Step[pinFacts]{{
			ID: "ate.pools.pin", Title: "Pin the unpinned serving pools to OLD",
			Doc: "Set " + fleet.VersionLabel + "=OLD in the nodeSelector of each serving pool that has no version pin, only while no " +
				"actor is bound to one of its workers: drain the pool's workers (the edit re-renders its Deployment, which " +
				"replaces them all), read again, and edit only if still no actor is bound to one of them (else stop, naming " +
				"it). A pool pinned to another version is never edited.",
			Done: func(f pinFacts) (bool, string) {
				return len(f.unpinned) == 0, fmt.Sprintf("%d serving pool(s) without a version pin", len(f.unpinned))
			},
			Guards: []runbook.Guard[pinFacts]{
				{Name: "OLD is known (one or two versioned atelet DaemonSets)", Check: func(f pinFacts) (bool, string) {
					return f.c.Old != "", "no versioned atelet DaemonSet says which version is OLD (kubectl ate status)"
				}},
				{Name: "no actor is bound to a worker of an unpinned pool", Check: func(f pinFacts) (bool, string) {
					return len(f.bound) == 0, fmt.Sprintf("%d actor(s) on their workers (%s); pinning now would roll the pool's "+
						"Deployment through them. Suspend them first ("+node.SuspendByHand+"), then re-run",
						len(f.bound), actorNames(f.bound))
				}},
			},
			Plan: func(f pinFacts) []runbook.Change {
				var out []runbook.Change
				for _, p := range f.unpinned {
					if f.inv != nil {
						for _, w := range pinWorkers(f.inv, []fleet.Pool{p}) {
							out = append(out, runbook.Change{Object: "worker/" + w.Name, Action: "DrainWorker",
								Detail: "pod " + w.Pod + ", pool " + w.PoolKey() + ": no actor is placed there before the pin"})
						}
					}
					out = append(out, runbook.Change{Object: "workerpool/" + p.Key(), Action: "patch",
						Detail: "spec.template.nodeSelector " + fleet.VersionLabel + "=" + f.c.Old})
				}
				return out
			},
			Act: func(ctx context.Context, f pinFacts) error {
				for _, p := range f.unpinned {
					if err := drainForPin(ctx, api, rec, p, f.inv); err != nil {
						return err
					}
					if err := pinPool(ctx, dyn, rec, p, f.c.Old); err != nil {
						return err
					}
				}
				return nil
			},
		}},
	}
}

// pinPool pins p to version, only if p is still the object observed (the
// patch carries its resourceVersion): an edit since then is re-observed.
func pinPool(ctx context.Context, dyn dynamic.Interface, rec kube.Recorder, p fleet.Pool, version string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": p.Object.GetResourceVersion()},
		"spec":     map[string]any{"template": map[string]any{"nodeSelector": map[string]string{fleet.VersionLabel: version}}},
	})
	if err != nil {
		return err
	}
	pools := dyn.Resource(fleet.WorkerPoolGVR).Namespace(p.Namespace)
	message := fmt.Sprintf("pinned to %s=%s (no actor was on its workers)", fleet.VersionLabel, version)
	if _, err := pools.Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		// Applied all the same if the pool changed since it was observed
		// and now carries the pin.
		err = kube.RecordIfApplied(ctx, err, rec, "PoolPinned", message, func(ctx context.Context) (corev1.ObjectReference, bool) {
			got, gerr := pools.Get(ctx, p.Name, metav1.GetOptions{})
			if gerr != nil || got.GetResourceVersion() == p.Object.GetResourceVersion() {
				return corev1.ObjectReference{}, false
			}
			pin, _, _ := unstructured.NestedString(got.Object, "spec", "template", "nodeSelector", fleet.VersionLabel)
			return fleet.PoolRef(p.Namespace, p.Name), pin == version
		})
		return fmt.Errorf("pin pool %s: %w", p.Key(), err)
	}
	rec.Record(ctx, fleet.PoolRef(p.Namespace, p.Name), false, "PoolPinned", message)
	return nil
}

// drainForPin drains p's workers and reads again until none is left
// undrained (a pod may register meanwhile): from then on no actor is
// placed on them, so an actor the read after the drain does not show bound
// cannot be rolled through by the pin. One that is bound stops the run.
func drainForPin(ctx context.Context, api PinAPI, rec kube.Recorder, p fleet.Pool, inv *ateapi.Inventory) error {
	pools := []fleet.Pool{p}
	for round := 0; ; round++ {
		todo := pinWorkers(inv, pools)
		if round > 0 {
			if b := pinBlockers(inv, pools); len(b) > 0 {
				return runbook.Blocked(fmt.Errorf("pool %s was not pinned: %d actor(s) were placed on its workers since the check (%s). "+
					"Its workers are drained (the pin replaces them all): suspend them ("+node.SuspendByHand+"), "+
					"then re-run", p.Key(), len(b), actorNames(b)))
			}
			if len(todo) == 0 {
				return nil
			}
		}
		if round == 5 {
			return fmt.Errorf("pool %s: workers kept registering undrained while it was drained for its pin; re-run", p.Key())
		}
		var done []string
		for _, w := range todo {
			if _, err := api.DrainWorker(ctx, w.Name); err != nil && !errors.Is(err, ateapi.ErrNotFound) {
				return fmt.Errorf("drain worker %s (pod %s) of pool %s before its pin: %w", w.Name, w.Pod, p.Key(), err)
			}
			done = append(done, w.Name+" (pod "+w.Pod+")")
		}
		if len(done) > 0 {
			rec.Record(ctx, fleet.PoolRef(p.Namespace, p.Name), false, "WorkerDrained", "DrainWorker "+strings.Join(done, ", ")+
				": no actor is placed there before the pool is pinned (the pin replaces every worker)")
		}
		var err error
		if inv, err = api.Inventory(ctx); err != nil {
			return err
		}
	}
}
