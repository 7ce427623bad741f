package roll

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Retire and rollback both end by removing one version: its pools, then its
// atelet DaemonSet. Retire removes OLD once every node is at NEW; rollback
// removes NEW once every node is back at OLD. The steps below are written
// once and used by both runbooks.

// removal says which version a runbook removes, and in whose words.
type removal struct {
	// verb names the runbook in Events ("retire", "rollback").
	verb string
	// side is "OLD" or "NEW"; pick returns its version ("" when the cluster
	// has one atelet DaemonSet, so there is nothing to remove).
	side string
	pick func(c *fleet.Cluster) string
	// moveOff is the command that moves the nodes off the removed version.
	moveOff string
}

var (
	retireOld = removal{verb: "retire", side: "OLD", moveOff: "kubectl ate roll next-node --all --wait",
		pick: func(c *fleet.Cluster) string {
			if c.New == "" {
				return ""
			}
			return c.Old
		}}
	rollbackNew = removal{verb: "rollback", side: "NEW", moveOff: "kubectl ate rollback next-node --all",
		pick: func(c *fleet.Cluster) string { return c.New }}
)

// removalFacts is the cluster as the removing steps see it.
type removalFacts struct {
	c *fleet.Cluster
	// version is the one removed; "" when only one atelet DaemonSet is left.
	version string
	// pools are pinned to version; atelet is version's DaemonSet.
	pools  []fleet.Pool
	atelet *appsv1.DaemonSet
	// bound are the actors bound to a worker of pools; running lists the
	// pools' Running pods ("namespace/name on node").
	bound   []ateapi.Actor
	running []string
	// saved holds, for retire, the keys of the pools whose backup is
	// current in every place asked for.
	saved map[string]bool
	// backup says where retire saves each pool.
	backup BackupOptions
	// moves are the nodes half-way in a move, either way (Locator).
	moves []node.HalfMoved
	// unserved are the pools whose clone serves nowhere (UnservedClones).
	unserved []string
}

func (f removalFacts) nodesAt() []string {
	if f.version == "" {
		return nil
	}
	return f.c.NodesAt(f.version)
}

// observeRemoval reads the cluster, and for version's pools their pods and
// the actors bound to their workers.
func observeRemoval(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, api fleet.Inventorier,
	r removal) (removalFacts, error) {
	c, err := fleet.ObserveCluster(ctx, cs, dyn)
	if err != nil {
		return removalFacts{}, err
	}
	f := removalFacts{c: c, version: r.pick(c)}
	if f.version == "" || len(c.Problems) > 0 {
		return f, nil
	}
	f.pools = c.PoolsPinnedTo(f.version)
	for _, a := range c.Atelets {
		if a.Version != f.version {
			continue
		}
		if f.atelet, err = cs.AppsV1().DaemonSets(fleet.Namespace).Get(ctx, a.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			f.atelet, err = nil, nil
		}
		if err != nil {
			return f, err
		}
	}
	// Every pool's pods: the nodes' positions read them (a node half-way
	// either way must be finished before a version goes).
	pods, err := fleet.PoolPods(ctx, cs, c.Pools)
	if err != nil {
		return f, err
	}
	inv, err := api.Inventory(ctx)
	if err != nil {
		return f, err
	}
	f.moves = node.NewLocator(c, pods, inv).HalfMoved()
	removed := fleet.PoolSet(f.pools)
	for _, p := range pods {
		if removed[p.Namespace+"/"+p.Labels[fleet.PoolLabel]] && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			f.running = append(f.running, p.Namespace+"/"+p.Name+" on "+p.Spec.NodeName)
		}
	}
	f.bound = fleet.ActorsBoundTo(inv, f.pools)
	f.unserved = fleet.UnservedClones(inv, f.pools, c.Pools)
	return f, nil
}

// The guards every removing step shares.
func shapeKnown() runbook.Guard[removalFacts] {
	return runbook.Guard[removalFacts]{Name: "the roll's shape is known (two atelet DaemonSets, labelled nodes)",
		Check: func(f removalFacts) (bool, string) {
			return len(f.c.Problems) == 0, strings.Join(f.c.Problems, "; ") + " (kubectl ate status shows them)"
		}}
}

func noNodeAt(r removal) runbook.Guard[removalFacts] {
	return runbook.Guard[removalFacts]{Name: "no node is at " + r.side, Check: func(f removalFacts) (bool, string) {
		n := f.nodesAt()
		return len(n) == 0, fmt.Sprintf("%d node(s) at %s (%s) still run on these pools and this atelet; move them first: %s",
			len(n), f.version, fleet.Brief(n), r.moveOff)
	}}
}

// noNodeHalfway: no node stands half-way in a move, either way — the node
// runbook's own positions, the ones status shows and next-node acts on. A
// version's pools and atelet are the other way's reserve until then.
func noNodeHalfway() runbook.Guard[removalFacts] {
	return runbook.Guard[removalFacts]{Name: "no node is half-way in a move", Check: func(f removalFacts) (bool, string) {
		if len(f.moves) == 0 {
			return true, ""
		}
		m := f.moves[0]
		return false, fmt.Sprintf("%s; finish it first: %s", m, m.Next())
	}}
}

func noActorBound(r removal) runbook.Guard[removalFacts] {
	return runbook.Guard[removalFacts]{Name: "no actor is bound to a worker of the " + r.side + " pools",
		Check: func(f removalFacts) (bool, string) {
			msg := fmt.Sprintf("%d actor(s) bound to a %s worker (%s); deleting the pool would crash them. ", len(f.bound),
				f.version, actorNames(f.bound))
			at := f.nodesAt()
			var off []string // their workers' nodes no longer carry the version
			for _, a := range f.bound {
				if a.Node != "" && !slices.Contains(at, a.Node) && !slices.Contains(off, a.Node) {
					off = append(off, a.Node)
				}
			}
			if len(off) == 0 {
				return len(f.bound) == 0, msg + "Suspend them (" + node.SuspendByHand + ") and re-run"
			}
			// A suspend checkpoints through the atelet of the worker's own
			// node, of the worker's version: gone once the node flipped.
			return false, msg + fmt.Sprintf("Node(s) %s no longer carry %s, so no %s atelet there can checkpoint them and a "+
				"suspend cannot work: put the label back (kubectl label node NODE %s=%s --overwrite), wait for the %s atelet "+
				"there to be Ready, suspend them ("+node.SuspendByHand+"), then move the node again and re-run",
				fleet.Brief(off), f.version, f.version, fleet.VersionLabel, f.version, f.version)
		}}
}

// deletePoolsStep deletes every pool pinned to the removed version once no
// node is at it and no actor is bound to one of their workers; extra are
// the runbook's own further guards.
func deletePoolsStep(id string, r removal, dyn dynamic.Interface, rec kube.Recorder, doc string,
	extra ...runbook.Guard[removalFacts]) runbook.Step[removalFacts] {
	return runbook.Step[removalFacts]{
		ID: id, Title: "Delete the pools pinned to " + r.side, Doc: doc,
		Done: func(f removalFacts) (bool, string) {
			switch {
			case len(f.c.Problems) > 0:
				return false, "the roll's shape is unknown"
			case f.version == "":
				return true, "one atelet DaemonSet (" + f.c.Old + "): no " + r.side + " version"
			}
			return len(f.pools) == 0, fmt.Sprintf("%d pool(s) pinned to %s", len(f.pools), f.version)
		},
		Guards: append([]runbook.Guard[removalFacts]{shapeKnown(), noNodeAt(r), noNodeHalfway(), noActorBound(r)}, extra...),
		Plan: func(f removalFacts) []runbook.Change {
			var out []runbook.Change
			for _, p := range f.pools {
				detail := "pinned to " + p.Pin
				if p.ClonedFrom != "" {
					detail += ", clone of " + p.ClonedFrom
				}
				out = append(out, runbook.Change{Object: "workerpool/" + p.Key(), Action: "delete", Detail: detail})
			}
			return out
		},
		Act: func(ctx context.Context, f removalFacts) error {
			for _, p := range f.pools {
				why := fmt.Sprintf("%s: deleted %s, pinned to %s; no node was at %s and no actor was bound to its workers", r.verb,
					p.Key(), p.Pin, p.Pin)
				if err := deletePool(ctx, dyn, rec, p, why); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// deleteAteletStep deletes the removed version's atelet DaemonSet once no
// node is at that version (it runs no pod then) and no pool is pinned to it.
func deleteAteletStep(id string, r removal, cs kubernetes.Interface, rec kube.Recorder, doc string) runbook.Step[removalFacts] {
	return runbook.Step[removalFacts]{
		ID: id, Title: "Delete the " + r.side + " atelet DaemonSet", Doc: doc,
		Done: func(f removalFacts) (bool, string) {
			switch {
			case len(f.c.Problems) > 0:
				return false, "the roll's shape is unknown"
			case f.atelet == nil:
				return true, "one atelet DaemonSet (" + f.c.Old + ")"
			}
			return false, "atelet DaemonSet " + f.atelet.Name + " (" + f.version + ") present"
		},
		Guards: []runbook.Guard[removalFacts]{shapeKnown(), noNodeAt(r), noNodeHalfway(), {Name: "no pool is pinned to " + r.side,
			Check: func(f removalFacts) (bool, string) {
				return len(f.pools) == 0, fmt.Sprintf("%d pool(s) still pinned to %s", len(f.pools), f.version)
			}}},
		Plan: func(f removalFacts) []runbook.Change {
			if f.atelet == nil {
				return nil
			}
			return []runbook.Change{{Object: "daemonset/" + fleet.Namespace + "/" + f.atelet.Name, Action: "delete",
				Detail: fleet.VersionLabel + "=" + f.version}}
		},
		Act: func(ctx context.Context, f removalFacts) error {
			why := fmt.Sprintf("%s: deleted the %s atelet DaemonSet; no node carries %s", r.verb, f.version, f.version)
			return deleteAtelet(ctx, cs, rec, f.atelet, why)
		},
	}
}

// deletePool deletes a pool (its Deployment and pods go with it), only the
// one observed (same UID), and waits until it is gone.
func deletePool(ctx context.Context, dyn dynamic.Interface, rec kube.Recorder, p fleet.Pool, why string) error {
	res := dyn.Resource(fleet.WorkerPoolGVR).Namespace(p.Namespace)
	del := func(ctx context.Context, name string, o metav1.DeleteOptions) error { return res.Delete(ctx, name, o) }
	if _, err := kube.DeleteIfUnchanged(ctx, rec, del, fleet.PoolRef(p.Namespace, p.Name), p.Object.GetUID(), why); err != nil {
		return fmt.Errorf("delete WorkerPool %s: %w", p.Key(), err)
	}
	return waitGone(ctx, func(ctx context.Context) error {
		_, err := res.Get(ctx, p.Name, metav1.GetOptions{})
		return err
	})
}

// deleteAtelet deletes an atelet DaemonSet, only the one observed (same
// UID), and waits until it is gone.
func deleteAtelet(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, ds *appsv1.DaemonSet, why string) error {
	dss := cs.AppsV1().DaemonSets(fleet.Namespace)
	ref := corev1.ObjectReference{Kind: "DaemonSet", APIVersion: "apps/v1", Namespace: ds.Namespace, Name: ds.Name, UID: ds.UID}
	if _, err := kube.DeleteIfUnchanged(ctx, rec, dss.Delete, ref, ds.UID, why); err != nil {
		return fmt.Errorf("delete DaemonSet %s/%s: %w", fleet.Namespace, ds.Name, err)
	}
	return waitGone(ctx, func(ctx context.Context) error {
		_, err := dss.Get(ctx, ds.Name, metav1.GetOptions{})
		return err
	})
}

// waitGone polls get until it answers NotFound, for at most two minutes
// (finalizers and garbage collection take seconds when the controllers run).
func waitGone(ctx context.Context, get func(context.Context) error) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("still present after 2m: is a finalizer stuck, or ate-controller down?")
	}
	return err
}
