package ate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RollbackRunbookName names the cluster-scope part of a rollback.
const RollbackRunbookName = "ate-rollback"

// Inventorier is the part of the substrate client that only reads.
type Inventorier interface {
	Inventory(ctx context.Context) (*ateapi.Inventory, error)
}

// rollbackFacts is the cluster as the rollback's cluster steps see it.
type rollbackFacts struct {
	c *Cluster
	// clones are the pools pinned to NEW; newDS is NEW's atelet DaemonSet.
	clones []Pool
	newDS  *appsv1.DaemonSet
	// bound are the actors bound to a worker of a clone.
	bound []ateapi.Actor
}

func (f rollbackFacts) nodesAtNew() []string {
	if f.c.New == "" {
		return nil
	}
	return f.c.NodesAt(f.c.New)
}

func actorNames(actors []ateapi.Actor) string {
	var names []string
	for _, a := range actors {
		names = append(names, a.Atespace+"/"+a.Name)
	}
	sort.Strings(names)
	return short(names)
}

// RollbackRunbook undoes steps 4 and 3 once every node is back at OLD:
// delete each clone (pools pinned to NEW) once no actor is bound to one of
// their workers, then the NEW atelet DaemonSet once no node carries NEW.
// Run it on runbook.ScopeTarget{Scope: "roll"}.
func RollbackRunbook(cs kubernetes.Interface, dyn dynamic.Interface, api Inventorier, rec kube.Recorder) *runbook.Runbook[rollbackFacts] {
	return &runbook.Runbook[rollbackFacts]{
		Name:  RollbackRunbookName,
		Title: "Remove the new version's pools and atelet once every node is back",
		Doc: `The cluster part of a rollback, after every node is back at OLD: delete each clone (a
WorkerPool pinned to NEW) once no actor is bound to one of its workers, then delete the NEW
atelet DaemonSet once no node carries NEW. The old pools and the old atelet are never
touched: rolling back leaves exactly what was there before the roll.`,
		Observe: func(ctx context.Context, _ runbook.Target) (rollbackFacts, error) {
			c, err := ObserveCluster(ctx, cs, dyn)
			if err != nil {
				return rollbackFacts{}, err
			}
			f := rollbackFacts{c: c}
			if c.New == "" {
				return f, nil
			}
			f.clones = c.PoolsPinnedTo(c.New)
			for _, a := range c.Atelets {
				if a.Version == c.New {
					if f.newDS, err = cs.AppsV1().DaemonSets(Namespace).Get(ctx, a.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
						f.newDS, err = nil, nil
					}
					if err != nil {
						return f, err
					}
				}
			}
			if len(f.clones) > 0 {
				inv, err := api.Inventory(ctx)
				if err != nil {
					return f, err
				}
				f.bound = actorsBoundTo(inv, f.clones)
			}
			return f, nil
		},
		Notes: func(f rollbackFacts) []string {
			var notes []string
			if n := f.nodesAtNew(); len(n) > 0 {
				notes = append(notes, fmt.Sprintf("%d node(s) still at %s (%s): kubectl ate rollback next-node --all", len(n), f.c.New, short(n)))
			}
			if len(f.bound) > 0 {
				notes = append(notes, fmt.Sprintf("%d actor(s) bound to a %s worker: %s", len(f.bound), f.c.New, actorNames(f.bound)))
			}
			return notes
		},
		Steps: []runbook.Step[rollbackFacts]{
			{
				ID: "ate.rollback.delete-clones", Title: "Delete the clones (pools pinned to NEW)",
				Doc: "Delete each WorkerPool pinned to NEW (its Deployment and pods go with it) once every node is back at OLD and no " +
					"actor is bound to one of its workers. The old pools are never touched.",
				Done: func(f rollbackFacts) (bool, string) {
					if len(f.c.Problems) > 0 {
						return false, "the roll's shape is unknown"
					}
					if f.c.New == "" {
						return true, "no NEW atelet DaemonSet: nothing pinned to a NEW version"
					}
					return len(f.clones) == 0, fmt.Sprintf("%d pool(s) pinned to %s", len(f.clones), f.c.New)
				},
				Guards: []runbook.Guard[rollbackFacts]{
					{Name: "the roll's shape is known (two atelet DaemonSets, labelled nodes)", Check: func(f rollbackFacts) (bool, string) {
						return len(f.c.Problems) == 0, strings.Join(f.c.Problems, "; ")
					}},
					{Name: "no node carries NEW", Check: func(f rollbackFacts) (bool, string) {
						n := f.nodesAtNew()
						return len(n) == 0, fmt.Sprintf("%d node(s) at %s (%s) still run on the clones; roll them back first: kubectl "+
							"ate rollback next-node --all", len(n), f.c.New, short(n))
					}},
					{Name: "no actor is bound to a worker of a clone", Check: func(f rollbackFacts) (bool, string) {
						return len(f.bound) == 0, fmt.Sprintf("%d actor(s) bound to a %s worker (%s); deleting the pool would crash "+
							"them. Suspend them (kubectl ate suspend actor NAME -a ATESPACE) and re-run", len(f.bound), f.c.New, actorNames(f.bound))
					}},
				},
				Plan: func(f rollbackFacts) []runbook.Change {
					var out []runbook.Change
					for _, p := range f.clones {
						detail := "pinned to " + p.Pin
						if p.ClonedFrom != "" {
							detail += ", clone of " + p.ClonedFrom
						}
						out = append(out, runbook.Change{Object: "workerpool/" + p.Key(), Action: "delete", Detail: detail})
					}
					return out
				},
				Act: func(ctx context.Context, f rollbackFacts) error {
					for _, p := range f.clones {
						uid := p.Object.GetUID()
						err := dyn.Resource(WorkerPoolGVR).Namespace(p.Namespace).Delete(ctx, p.Name,
							metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
						if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
							continue
						}
						if err != nil {
							return fmt.Errorf("delete WorkerPool %s: %w", p.Key(), err)
						}
						rec.Record(ctx, poolRef(p.Namespace, p.Name), false, "CloneDeleted", fmt.Sprintf("rollback: deleted %s, pinned "+
							"to %s; no actor was bound to its workers", p.Key(), p.Pin))
					}
					return nil
				},
				Wait: func(ctx context.Context, f rollbackFacts) error {
					for _, p := range f.clones {
						if err := waitGone(ctx, func(ctx context.Context) error {
							_, err := dyn.Resource(WorkerPoolGVR).Namespace(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
							return err
						}); err != nil {
							return fmt.Errorf("WorkerPool %s is not gone: %w", p.Key(), err)
						}
					}
					return nil
				},
			},
			{
				ID: "ate.rollback.delete-new-atelet", Title: "Delete the NEW atelet DaemonSet",
				Doc: "Delete the atelet DaemonSet of NEW once no node carries NEW (it runs no pod then) and no pool is pinned to NEW. " +
					"The old atelet DaemonSet stays.",
				Done: func(f rollbackFacts) (bool, string) {
					if f.newDS == nil {
						return true, "one atelet DaemonSet (" + f.c.Old + ")"
					}
					return false, "atelet DaemonSet " + f.newDS.Name + " (" + f.c.New + ") present"
				},
				Guards: []runbook.Guard[rollbackFacts]{
					{Name: "no node carries NEW", Check: func(f rollbackFacts) (bool, string) {
						n := f.nodesAtNew()
						return len(n) == 0, fmt.Sprintf("%d node(s) at %s (%s): their atelet is this DaemonSet's; roll them back "+
							"first", len(n), f.c.New, short(n))
					}},
					{Name: "no pool is pinned to NEW", Check: func(f rollbackFacts) (bool, string) {
						return len(f.clones) == 0, fmt.Sprintf("%d pool(s) still pinned to %s", len(f.clones), f.c.New)
					}},
				},
				Plan: func(f rollbackFacts) []runbook.Change {
					return []runbook.Change{{Object: "daemonset/" + Namespace + "/" + f.newDS.Name, Action: "delete",
						Detail: VersionLabel + "=" + f.c.New}}
				},
				Act: func(ctx context.Context, f rollbackFacts) error {
					uid := f.newDS.UID
					err := cs.AppsV1().DaemonSets(Namespace).Delete(ctx, f.newDS.Name,
						metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
					if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
						return nil
					}
					if err != nil {
						return fmt.Errorf("delete DaemonSet %s/%s: %w", Namespace, f.newDS.Name, err)
					}
					rec.Record(ctx, dsRef(f.newDS), false, "AteletDeleted", fmt.Sprintf("rollback: deleted the %s atelet DaemonSet; no "+
						"node carries %s", f.c.New, f.c.New))
					return nil
				},
				Wait: func(ctx context.Context, f rollbackFacts) error {
					return waitGone(ctx, func(ctx context.Context) error {
						_, err := cs.AppsV1().DaemonSets(Namespace).Get(ctx, f.newDS.Name, metav1.GetOptions{})
						return err
					})
				},
			},
		},
	}
}

func dsRef(ds *appsv1.DaemonSet) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "DaemonSet", APIVersion: "apps/v1", Namespace: ds.Namespace, Name: ds.Name, UID: ds.UID}
}

// waitGone polls get until it answers NotFound, for at most two minutes
// (finalizers and garbage collection take seconds when the controllers run).
func waitGone(ctx context.Context, get func(context.Context) error) error {
	ctx, cancel := context.WithTimeoutCause(ctx, 2*time.Minute, fmt.Errorf("still present after 2m: is a finalizer stuck, or "+
		"ate-controller down?"))
	defer cancel()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(delay):
		}
	}
}

// ExternalStep is a runbook step rollbook cannot do or observe: a command
// the user runs from a release checkout.
type ExternalStep struct {
	When    string `json:"when"`
	Command string `json:"command"`
}

// ControlPlaneFirst is what must run before any node moves back once every
// node reached NEW (the only time step 6 may have run): the OLD API server.
func ControlPlaneFirst(old string) ExternalStep {
	return ExternalStep{When: "if step 6 ran (control plane upgraded): first, before any node moves back",
		Command: "VERSION=" + old + " go run ./cmd/ate-setup deploy apiserver"}
}

// RollbackExternalSteps are the commands left to the user once the nodes,
// the clones and the NEW atelet are back, in the runbook's order ("the
// control plane first, then the nodes, then ate-controller last"), to run
// from a checkout of the OLD release with the install's environment. The
// check for a third atelet DaemonSet comes only after them: that is when
// one can appear.
func RollbackExternalSteps(old string) []ExternalStep {
	v := "VERSION=" + old + " "
	return []ExternalStep{
		{When: "if you relabeled the GKE node pool", Command: "park the autoscaler again, then set the node pool label back: " +
			"gcloud container node-pools update $NODEPOOL --cluster $CLUSTER --zone $ZONE --node-labels=<every existing user label>," +
			VersionLabel + "=" + old},
		{When: "if step 6 ran: now that the nodes are back", Command: v + "go run ./cmd/ate-setup deploy ate-system"},
		{When: "if step 2 ran (ate-controller upgraded): last", Command: v + "go run ./cmd/ate-setup deploy ate-controller"},
		{When: "then", Command: "kubectl ate rollback   (checks that no third atelet DaemonSet appeared)"},
	}
}

// RollbackOptions tune a whole rollback.
type RollbackOptions struct {
	Move MoveOptions
	// ControlPlaneReverted says `deploy apiserver` ran from the OLD checkout
	// (or step 6 never ran); needed once every node reached NEW.
	ControlPlaneReverted bool
}

// RollbackAll undoes the roll in the runbook's order within one session:
// refuse to move a node while the control plane may still be NEW, move every
// node back, then delete the clones and the NEW atelet. The result merges
// the nodes' and the cluster steps' results.
func RollbackAll(ctx context.Context, m Mover, inv Inventorier, o RollbackOptions) (runbook.Result, error) {
	c, err := ObserveCluster(ctx, m.Client, m.Dynamic)
	if err != nil {
		return runbook.Result{}, err
	}
	if len(c.Problems) > 0 {
		return runbook.Result{}, runbook.Blocked(fmt.Errorf("the rollback cannot proceed: %s", strings.Join(c.Problems, "; ")))
	}
	if c.New == "" {
		return runbook.Result{Runbook: RollbackRunbookName, RunID: m.RunID, DryRun: m.DryRun, Outcome: runbook.OutcomeDone}, nil
	}
	if atVersion(c, c.New) && !o.ControlPlaneReverted {
		first := ControlPlaneFirst(c.Old)
		return runbook.Result{}, runbook.Blocked(fmt.Errorf("every node is at %s, so step 6 may have upgraded the control plane; "+
			"nothing was changed. From a checkout of the OLD release run:\n    %s\nthen re-run with --control-plane-reverted "+
			"(pass it too if step 6 never ran)", c.New, first.Command))
	}
	o.Move.Direction, o.Move.All, o.Move.Node = Rollback, true, ""
	nodes, err := MoveNodes(ctx, m, o.Move)
	if err != nil || (nodes.Outcome != runbook.OutcomeDone && nodes.Outcome != runbook.OutcomePlanned) || m.DryRun && len(nodes.Targets) > 0 {
		return nodes, err
	}
	res := runbook.Run(ctx, RollbackRunbook(m.Client, m.Dynamic, inv, m.Recorder), []runbook.Target{runbook.ScopeTarget{Scope: "roll"}},
		runbook.Options{RunID: m.RunID, DryRun: m.DryRun, Reporter: m.Reporter, Paused: m.Paused})
	return runbook.Merge(RollbackRunbookName, nodes, res), nil
}

// StrayAtelets are the atelet DaemonSets other than version's: after a
// rollback there must be none (a third DaemonSet means the old checkout
// computed another version).
func StrayAtelets(c *Cluster, version string) []Atelet {
	var out []Atelet
	for _, a := range c.Atelets {
		if a.Version != version {
			out = append(out, a)
		}
	}
	return out
}
