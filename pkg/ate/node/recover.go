package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RecoverRunbookName owns the timers of recovering a node.
const RecoverRunbookName = "ate-recover-node"

// AnnRecoveringNode is declared on the held Lease while a recovery runs, as
// "RUN/NODE": deleting that node's pinned worker pods before any flip is the
// recovery itself, not the roll's step-5 mistake, for anyone watching.
const AnnRecoveringNode = "rollbook.dev/recovering-node"

// RecoverConfig tunes recovering a wrongly drained node.
type RecoverConfig struct {
	MaxConcurrentSuspends int
	SuspendInterval       time.Duration
	RevertCrashed         bool
	SuspendTimeout        time.Duration
	// ReplaceTimeout bounds the wait for the replacements to register.
	ReplaceTimeout time.Duration
	// DeleteTimeout bounds the wait for the drained workers' pods to go.
	DeleteTimeout time.Duration
}

// recoverFacts is a node and the worker pods that could replace its own.
type recoverFacts struct {
	cfg  *RecoverConfig
	node *corev1.Node
	// pods are the worker pods (any node, or none) of the pools the node's
	// version pins or no pin; deps their Deployments by namespace/pool.
	pods []corev1.Pod
	deps map[string]*appsv1.Deployment
	inv  *ateapi.Inventory
}

// stale are the node's DRAINING workers whose pod still runs: there is no
// undrain, so only a new pod gives the node a worker that takes actors.
func (f recoverFacts) stale() []ateapi.Worker {
	live := map[string]bool{}
	for _, p := range f.pods {
		if p.Spec.NodeName == f.node.Name && p.DeletionTimestamp == nil && !kube.PodTerminal(&p) {
			live[string(p.UID)] = true
		}
	}
	var out []ateapi.Worker
	for _, w := range f.inv.WorkersOnNode(f.node.Name) {
		if w.State == ateapi.WorkerDraining && live[w.Name] {
			out = append(out, w)
		}
	}
	return out
}

// nodeView is the node as step c of the roll sees it, narrowed to the stale
// workers: the roll's suspend loop then empties exactly those, and neither
// drains the node's other workers nor touches actors merely paused there.
func (f recoverFacts) nodeView() nodeFacts {
	return nodeFacts{cfg: &Config{}, node: f.node, inv: narrowTo(f.inv, f.node.Name, f.stale())}
}

// narrowTo is inv with node's workers narrowed to stale: the actors of the
// node's other workers are not residents of that view, and actors merely
// paused on the node (on no worker) are left out, as deleting worker pods
// does not touch them.
func narrowTo(all *ateapi.Inventory, node string, stale []ateapi.Worker) *ateapi.Inventory {
	inv := &ateapi.Inventory{}
	keep := map[string]bool{}
	for _, w := range stale {
		keep[w.Name] = true
	}
	for _, w := range all.Workers {
		if w.Node != node || keep[w.Name] {
			inv.Workers = append(inv.Workers, w)
		}
	}
	for _, a := range all.Actors {
		if a.Worker == "" && a.OnNode(node) {
			continue
		}
		inv.Actors = append(inv.Actors, a)
	}
	return inv
}

// residents are the actors on the stale workers, live and crashed.
func (f recoverFacts) residents() (live, crashed []ateapi.Actor) { return f.nodeView().residents() }

// occupied names the stale workers that host an actor.
func (f recoverFacts) occupied() []string {
	hosts := hostsByWorker(f.inv)
	var out []string
	for _, w := range f.stale() {
		if a := hosts[w.Name]; a != "" {
			out = append(out, w.Pod+" (hosts "+a+")")
		}
	}
	return out
}

// awaited are the worker pods that are not yet fresh workers: replacements
// not created, not placed, not Ready, or Ready but not registered ACTIVE.
// A pod the scheduler found no room for (the roll's reserve) is not awaited.
func (f recoverFacts) awaited() []string {
	var out []string
	active := map[string]int{}
	for _, p := range f.pods {
		if p.DeletionTimestamp == nil && !kube.PodTerminal(&p) {
			active[p.Namespace+"/"+p.Labels[fleet.PoolLabel]]++
		}
	}
	for key, d := range f.deps {
		if want := int(ptr.Deref(d.Spec.Replicas, 1)); active[key] < want {
			out = append(out, fmt.Sprintf("pool %s: %d of %d pod(s) created", key, active[key], want))
		}
	}
	workers := map[string]ateapi.Worker{}
	for _, w := range f.inv.Workers {
		workers[w.Name] = w
	}
	for _, p := range f.pods {
		if p.DeletionTimestamp != nil || kube.PodTerminal(&p) {
			continue
		}
		name := p.Namespace + "/" + p.Name
		w, registered := workers[string(p.UID)]
		switch {
		case p.Spec.NodeName == "" && unschedulable(&p):
		case p.Spec.NodeName == "":
			out = append(out, name+" not scheduled yet")
		case !kube.PodReady(&p):
			out = append(out, name+" not Ready")
		case !registered:
			out = append(out, name+" not registered as a worker")
		case p.Spec.NodeName == f.node.Name && w.State != ateapi.WorkerActive:
			out = append(out, name+" is "+string(w.State))
		}
	}
	sort.Strings(out)
	return out
}

// fresh counts the node's ACTIVE workers.
func (f recoverFacts) fresh() int {
	n := 0
	for _, w := range f.inv.WorkersOnNode(f.node.Name) {
		if w.State == ateapi.WorkerActive {
			n++
		}
	}
	return n
}

// RecoverRunbook is the runbook's recovery from draining the wrong node
// (there is no undrain): empty the node's drained workers, delete their
// pods, and wait until their Deployments' replacements are fresh ACTIVE
// workers. The node keeps its version label throughout.
func RecoverRunbook(cs kubernetes.Interface, api API, rec kube.Recorder, cfg *RecoverConfig) *runbook.Runbook[recoverFacts] {
	b := &recoverBuilder{cs: cs, api: api, rec: rec, cfg: cfg}
	// The roll's evacuation, on the node narrowed to its stale workers
	// (nodeView); each round observes the node afresh.
	b.evac = &evacuation{api: api, rec: rec, maxSuspends: cfg.MaxConcurrentSuspends, suspendInterval: cfg.SuspendInterval,
		revertCrashed: cfg.RevertCrashed, look: func(ctx context.Context, prev nodeFacts) (nodeFacts, error) {
			g, err := b.observe(ctx, prev.node.Name)
			if err != nil {
				return nodeFacts{}, err
			}
			return g.nodeView(), nil
		}}
	return &runbook.Runbook[recoverFacts]{
		Name:  RecoverRunbookName,
		Title: "Recover a node whose workers were drained by mistake",
		Doc: `There is no undrain: a DRAINING worker never takes an actor again. Suspend the actors still on
the node's drained workers (as the roll's suspend step does), delete those workers' pods, and
wait until their Deployments' replacements are Ready and registered as fresh ACTIVE workers.
The node's version label never changes, so the replacements may land on the node itself. Workers
of the node that are not draining, and actors merely paused on the node, are left alone.`,
		Observe: func(ctx context.Context, t runbook.Target) (recoverFacts, error) {
			return b.observe(ctx, t.Ref().Name)
		},
		Notes: recoverFacts.notes,
		Steps: []runbook.Step[recoverFacts]{b.suspend(), b.deletePods(), b.replacements(), b.clearMarks()},
	}
}

// recoverBuilder makes the recover-node runbook's steps, one method each,
// over the run's clients and the evacuation they share.
type recoverBuilder struct {
	cs   kubernetes.Interface
	api  API
	rec  kube.Recorder
	cfg  *RecoverConfig
	evac *evacuation
}

func (b *recoverBuilder) observe(ctx context.Context, name string) (recoverFacts, error) {
	return observeRecover(ctx, b.cs, b.api, b.cfg, name)
}

// notes says what a stopped recovery left on the node.
func (f recoverFacts) notes() []string {
	if s := f.stale(); len(s) > 0 {
		return []string{fmt.Sprintf("%d drained worker(s) still on %s; re-run to finish recovering it", len(s), f.node.Name)}
	}
	return nil
}

func (b *recoverBuilder) suspend() runbook.Step[recoverFacts] {
	return runbook.Step[recoverFacts]{
		ID: "ate.recover.suspend", Title: "Suspend every actor on the node's drained workers",
		Doc: "Suspend the actors bound to the node's DRAINING workers, a few at a time, until none is left, exactly as " +
			"the roll's suspend step does; a CRASHED actor stops the run unless --revert-crashed says to revert it.",
		Timeout: b.cfg.SuspendTimeout,
		Done: func(f recoverFacts) (bool, string) {
			live, crashed := f.residents()
			occ := f.occupied()
			return len(live)+len(crashed)+len(occ) == 0, fmt.Sprintf("%d drained worker(s) on the node, %d live and %d "+
				"crashed actor(s) on them", len(f.stale()), len(live), len(crashed))
		},
		Plan: func(f recoverFacts) []runbook.Change {
			live, crashed := f.residents()
			return suspendPlan(live, crashed)
		},
		Act: func(ctx context.Context, f recoverFacts) error {
			// The roll's pace check: the drained workers' pods still
			// run, so the budget is --suspend-timeout (no eviction
			// window has started), and stopping leaves every actor
			// running where it is.
			e := *b.evac
			pace, _ := ParsePace(f.node.Annotations[AnnSuspendPace])
			e.meter, e.budget = newPaceMeter(pace), b.cfg.SuspendTimeout
			e.measured = func(ctx context.Context, p Pace) error {
				_, err := kube.SetNodeKeys(ctx, b.cs, f.node.Name, kube.NodeChange{Annotations: map[string]*string{
					AnnSuspendPace: ptr.To(p.String())}})
				return err
			}
			return e.empty(ctx, f.nodeView())
		},
	}
}

func (b *recoverBuilder) deletePods() runbook.Step[recoverFacts] {
	return runbook.Step[recoverFacts]{
		ID: "ate.recover.delete-pods", Title: "Delete the drained workers' pods",
		Doc: "Delete the pods of the node's DRAINING workers; their Deployments create replacements, which register as " +
			"new workers. A pod whose worker hosts an actor (read again right before) is never deleted.",
		Done: func(f recoverFacts) (bool, string) {
			s := f.stale()
			return len(s) == 0, fmt.Sprintf("%d drained worker pod(s) on the node", len(s))
		},
		Guards: []runbook.Guard[recoverFacts]{{
			Name: "no actor lives on the node's drained workers",
			Check: func(f recoverFacts) (bool, string) {
				occ := f.occupied()
				return len(occ) == 0, fmt.Sprintf("drained worker pod(s) %s still host an actor; deleting them would crash it. "+
					"Re-run to suspend it", fleet.Brief(occ))
			},
		}},
		Plan: func(f recoverFacts) []runbook.Change {
			var out []runbook.Change
			for _, w := range f.stale() {
				out = append(out, runbook.Change{Object: "pod/" + w.Namespace + "/" + w.Pod, Action: "delete",
					Detail: "worker " + w.Name + " DRAINING"})
			}
			return out
		},
		Act: func(ctx context.Context, f recoverFacts) error {
			var pods []idlePod
			for _, w := range f.stale() {
				pods = append(pods, idlePod{ref: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: w.Namespace,
					Name: w.Pod}, uid: types.UID(w.Name), why: fmt.Sprintf("worker %s on node %s was drained and there is no "+
					"undrain; its pool replaces the pod", w.Name, f.node.Name)})
			}
			return b.evac.deleteIdle(ctx, b.cs, b.rec, pods, "Re-run to suspend it")
		},
		Timeout: b.cfg.DeleteTimeout,
		Wait: func(ctx context.Context, f recoverFacts) error {
			gone := map[types.UID]bool{}
			for _, w := range f.stale() {
				gone[types.UID(w.Name)] = true
			}
			// A node whose kubelet is down finishes no deletion: stop within
			// seconds naming it, not at the budget's end.
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go kube.CancelOnNodeDown(ctx, cancel, b.cs, func(context.Context) string { return f.node.Name })
			err := kube.WaitForNoPods(ctx, b.cs, f.node.Name, func(p *corev1.Pod) bool { return gone[p.UID] })
			var nd *kube.NodeNotReadyError
			if errors.As(context.Cause(ctx), &nd) {
				return runbook.Blocked(fmt.Errorf("%w: its kubelet cannot finish deleting the drained workers' pods "+
					"(their Deployments already replace them elsewhere); bring the node back and run the same command "+
					"again, or, once you know the node is gone for good, delete its Node object", nd))
			}
			return err
		},
	}
}

func (b *recoverBuilder) replacements() runbook.Step[recoverFacts] {
	return runbook.Step[recoverFacts]{
		ID: "ate.recover.replacements", Title: "Wait for the replacements to register as fresh ACTIVE workers",
		Doc: "Wait until every worker Deployment of the node's version has all its pods again, each placed pod is Ready " +
			"and registered as a worker, and the node's workers are ACTIVE. A replacement the scheduler has no room for " +
			"stays Pending, as the roll's reserve does, and is not waited for.",
		Timeout: b.cfg.ReplaceTimeout,
		Done: func(f recoverFacts) (bool, string) {
			a := f.awaited()
			if len(f.stale()) > 0 || len(a) > 0 {
				return false, fmt.Sprintf("%d drained worker pod(s) on the node; waiting for %s", len(f.stale()),
					fleet.OrNone(fleet.Brief(a)))
			}
			return true, fmt.Sprintf("%d ACTIVE worker(s) on the node, every worker pod Ready and registered", f.fresh())
		},
		Act: func(context.Context, recoverFacts) error { return nil },
		Wait: func(ctx context.Context, f recoverFacts) error {
			// Pods are watched; the substrate API has no watch, so
			// registration is polled, gently.
			if err := waitPodsSettled(ctx, b.cs, f); err != nil {
				return err
			}
			for delay := 200 * time.Millisecond; ; delay = min(2*delay, 3*time.Second) {
				g, err := b.observe(ctx, f.node.Name)
				if err != nil {
					return err
				}
				a := g.awaited()
				if len(a) == 0 && len(g.stale()) == 0 {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("replacements of the drained workers on %s not registered: waiting for %s: %w", f.node.Name,
						fleet.Brief(a), context.Cause(ctx))
				case <-time.After(delay):
				}
			}
		},
	}
}

func (b *recoverBuilder) clearMarks() runbook.Step[recoverFacts] {
	return runbook.Step[recoverFacts]{
		ID: "ate.recover.clear-marks", Title: "Forget the abandoned move",
		Doc: "Remove the roll's marks (" + fleet.AnnMovingTo + ", " + AnnResidents + ") from the node: the move it recorded was " +
			"the mistake being recovered from, and a roll that still saw them would treat the node as half-moved.",
		Done: func(f recoverFacts) (bool, string) {
			_, moving := f.node.Annotations[fleet.AnnMovingTo]
			_, residents := f.node.Annotations[AnnResidents]
			return !moving && !residents, fmt.Sprintf("%s=%q", fleet.AnnMovingTo, f.node.Annotations[fleet.AnnMovingTo])
		},
		Plan: func(f recoverFacts) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.node.Name, Action: "annotate",
				Detail: fleet.AnnMovingTo + "-, " + AnnResidents + "-"}}
		},
		Act: func(ctx context.Context, f recoverFacts) error {
			_, err := kube.SetNodeKeys(ctx, b.cs, f.node.Name, kube.NodeChange{Annotations: map[string]*string{fleet.AnnMovingTo: nil,
				AnnResidents: nil}})
			return err
		},
	}
}

// waitPodsSettled watches the worker pods until each is Ready or found no
// room by the scheduler.
func waitPodsSettled(ctx context.Context, cs kubernetes.Interface, f recoverFacts) error {
	pods := cs.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = fleet.PoolLabel
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = fleet.PoolLabel
			return pods.Watch(ctx, o)
		},
	}
	settled := func(store cache.Store) bool {
		for _, o := range store.List() {
			p := o.(*corev1.Pod)
			if !f.relevant(p) || p.DeletionTimestamp != nil || kube.PodTerminal(p) {
				continue
			}
			if waiting := p.Spec.NodeName != "" || !unschedulable(p); waiting && !kube.PodReady(p) {
				return false
			}
		}
		return true
	}
	var store cache.Store
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) {
		store = s
		return settled(s), nil
	}, func(watch.Event) (bool, error) { return settled(store), nil })
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("worker pods replacing the drained ones on %s are not Ready: %w", f.node.Name, context.Cause(ctx))
	}
	return err
}

// relevant: a worker pod the node's version could host (pinned to it, or
// unpinned).
func (f recoverFacts) relevant(p *corev1.Pod) bool {
	if _, ok := p.Labels[fleet.PoolLabel]; !ok {
		return false
	}
	pin, pinned := p.Spec.NodeSelector[fleet.VersionLabel]
	return !pinned || pin == f.node.Labels[fleet.VersionLabel]
}

func observeRecover(ctx context.Context, cs kubernetes.Interface, api API, cfg *RecoverConfig, name string) (recoverFacts, error) {
	f := recoverFacts{cfg: cfg, deps: map[string]*appsv1.Deployment{}}
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return f, err
	}
	f.node = n
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
	if err != nil {
		return f, fmt.Errorf("list worker pods: %w", err)
	}
	for _, p := range pods.Items {
		if f.relevant(&p) {
			f.pods = append(f.pods, p)
		}
	}
	deps, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
	if err != nil {
		return f, fmt.Errorf("list worker pool Deployments: %w", err)
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		// A pool of another version is not awaited.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: d.Spec.Template.Labels}, Spec: d.Spec.Template.Spec}
		if d.DeletionTimestamp == nil && f.relevant(pod) {
			f.deps[d.Namespace+"/"+d.Spec.Template.Labels[fleet.PoolLabel]] = d
		}
	}
	f.inv, err = api.Inventory(ctx)
	return f, err
}

// unschedulable: the scheduler looked and found no node with room.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}
