package ate

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Sides says which way a node moves: roll is OLD → NEW, rollback the mirror.
type Sides struct {
	From, To  string
	ToAtelet  string // the DaemonSet of To
	FromPools []Pool
	ToPools   []Pool
	NodesAtTo map[string]bool
	FirstNode bool // no node is at To yet: no capacity to require
}

// NodeConfig tunes moving a node.
type NodeConfig struct {
	Sides
	MaxConcurrentSuspends int
	SuspendInterval       time.Duration
	RevertCrashed         bool
	SuspendTimeout        time.Duration
	AteletTimeout         time.Duration
	VerifyTimeout         time.Duration
	RunID                 string
}

// API is the part of the substrate client the node runbook uses.
type API interface {
	Inventory(ctx context.Context) (*ateapi.Inventory, error)
	DrainWorker(ctx context.Context, name string) (ateapi.Worker, error)
	SuspendActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
	RevertActor(ctx context.Context, atespace, name string) (ateapi.Actor, error)
}

type nodeFacts struct {
	cfg  *NodeConfig
	node *corev1.Node
	pods []corev1.Pod
	inv  *ateapi.Inventory
}

func (f nodeFacts) flipped() bool { return f.node.Labels[VersionLabel] == f.cfg.To }

func poolSet(pools []Pool) map[string]bool {
	m := map[string]bool{}
	for _, p := range pools {
		m[p.Namespace+"/"+p.Name] = true
		m[p.Name] = true // workers may not carry the namespace in every era
	}
	return m
}

// podsOf returns the pods on the node that belong to pools.
func (f nodeFacts) podsOf(pools []Pool) []corev1.Pod {
	set := poolSet(pools)
	var out []corev1.Pod
	for _, p := range f.pods {
		if pool, ok := p.Labels[PoolLabel]; ok && set[p.Namespace+"/"+pool] && !kube.PodTerminal(&p) {
			out = append(out, p)
		}
	}
	return out
}

func (f nodeFacts) workers() []ateapi.Worker { return f.inv.WorkersOnNode(f.node.Name) }

func (f nodeFacts) undrained() []ateapi.Worker {
	var out []ateapi.Worker
	for _, w := range f.workers() {
		if w.State != ateapi.WorkerDraining {
			out = append(out, w)
		}
	}
	return out
}

// residents are the actors that must be suspended before the flip: bound
// to a worker on the node, or paused with their local state on it.
// Crashed ones are returned apart: suspend refuses them.
func (f nodeFacts) residents() (live, crashed []ateapi.Actor) {
	onNode := map[string]bool{}
	for _, w := range f.workers() {
		onNode[w.Name] = true
	}
	seen := map[string]bool{}
	for _, a := range f.inv.Actors {
		key := a.Atespace + "/" + a.Name
		if seen[key] || a.State == ateapi.ActorSuspended {
			continue
		}
		bound := a.Worker != "" && onNode[a.Worker]
		pinned := a.Worker == "" && (a.AssignedNode == f.node.Name || contains(a.SnapshotNodes, f.node.Name))
		if !bound && !pinned {
			continue
		}
		seen[key] = true
		if a.State == ateapi.ActorCrashed {
			crashed = append(crashed, a)
		} else {
			live = append(live, a)
		}
	}
	return live, crashed
}

func (f nodeFacts) ateletReady() (bool, string) {
	for _, p := range f.pods {
		if p.Labels[AppLabel] == AteletApp && p.Labels[VersionLabel] == f.cfg.To {
			if kube.PodReady(&p) {
				return true, "atelet " + p.Name + " Ready"
			}
			return false, "atelet " + p.Name + " is " + string(p.Status.Phase)
		}
	}
	return false, "no atelet for " + f.cfg.To + " on the node yet"
}

func (f nodeFacts) freeToWorkers() int {
	to := poolSet(f.cfg.ToPools)
	n := 0
	for _, w := range f.inv.Workers {
		if (to[w.Pool] || to[w.Namespace+"/"+w.Pool]) && f.cfg.NodesAtTo[w.Node] && w.State == ateapi.WorkerActive && w.Free() {
			n++
		}
	}
	return n
}

// toPodsReady counts the target pools' pods on the node and the Ready ones.
func (f nodeFacts) toPodsReady() (ready, total int) {
	for _, p := range f.podsOf(f.cfg.ToPools) {
		total++
		if kube.PodReady(&p) {
			ready++
		}
	}
	return ready, total
}

func (f nodeFacts) toWorkersActive() int {
	to := poolSet(f.cfg.ToPools)
	n := 0
	for _, w := range f.workers() {
		if (to[w.Pool] || to[w.Namespace+"/"+w.Pool]) && w.State == ateapi.WorkerActive {
			n++
		}
	}
	return n
}

// NodeRunbookName owns the timers of moving nodes.
const NodeRunbookName = "ate-node"

// NodeRunbook moves one node from cfg.From to cfg.To — the runbook's step 5
// a–f for a roll, and the same with the sides swapped for a rollback.
func NodeRunbook(cs kubernetes.Interface, api API, rec kube.Recorder, cfg *NodeConfig) *runbook.Runbook[nodeFacts] {
	return &runbook.Runbook[nodeFacts]{
		Name:  NodeRunbookName,
		Title: "Move one Agent Substrate node to another version",
		Doc: `Drain every worker on the node, suspend every actor living there (bound to its workers,
or paused with local state on it) until none is left, re-drain, flip the node's
ate.dev/substrate-version label, wait for that version's atelet to be Ready, and only then
delete the node's worker pods of the pools pinned to the version it left. No actor is ever
lost: a crashed actor stops the run unless --revert-crashed says to revert it.`,
		Observe: func(ctx context.Context, t runbook.Target) (nodeFacts, error) {
			name := strings.TrimPrefix(t.Name(), "node/")
			f := nodeFacts{cfg: cfg}
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return f, err
			}
			f.node = n
			if f.pods, err = kube.PodsOnNode(ctx, cs, name); err != nil {
				return f, err
			}
			f.inv, err = api.Inventory(ctx)
			return f, err
		},
		Notes: func(f nodeFacts) []string {
			live, crashed := f.residents()
			var notes []string
			if !f.flipped() && len(f.workers()) > len(f.undrained()) {
				notes = append(notes, fmt.Sprintf("workers on %s are DRAINING (there is no undrain); re-run to finish moving the node", f.node.Name))
			}
			if len(live)+len(crashed) > 0 && !f.flipped() {
				notes = append(notes, fmt.Sprintf("%d actor(s) still live on %s", len(live)+len(crashed), f.node.Name))
			}
			return notes
		},
		Steps: []runbook.Step[nodeFacts]{
			{
				ID: "ate.node.drain", Title: "Drain the node's workers",
				Doc: "Call DrainWorker for every worker on the node: bound actors keep running, but no new actor is placed there. Idempotent; NotFound (the pod is gone) is fine. There is no undrain.",
				Done: func(f nodeFacts) (bool, string) {
					if f.flipped() {
						return true, "node at " + f.cfg.To
					}
					u := f.undrained()
					return len(u) == 0, fmt.Sprintf("%d of %d worker(s) not draining", len(u), len(f.workers()))
				},
				Guards: []runbook.Guard[nodeFacts]{{
					Name: "a free worker of the target version exists for the actors to move to",
					Check: func(f nodeFacts) (bool, string) {
						return f.cfg.FirstNode || len(f.cfg.ToPools) == 0 || f.freeToWorkers() > 0,
							fmt.Sprintf("no free ACTIVE worker of the %s pools on a %s node; suspended actors would have nowhere to resume. Wait for one (kubectl ate status), or pass --wait", f.cfg.To, f.cfg.To)
					},
				}},
				Plan: func(f nodeFacts) []runbook.Change {
					var out []runbook.Change
					for _, w := range f.undrained() {
						out = append(out, runbook.Change{Object: "worker/" + w.Name, Action: "DrainWorker", Detail: "pod " + w.Pod + ", pool " + w.Pool})
					}
					return out
				},
				Act: func(ctx context.Context, f nodeFacts) error {
					return drainWorkers(ctx, api, rec, f.node, f.undrained())
				},
			},
			{
				ID: "ate.node.suspend", Title: "Suspend every actor on the node",
				Doc:     "Suspend the actors bound to the node's workers and the paused actors whose local snapshot is on the node, a few at a time; repeat until none is left (traffic may wake actors meanwhile), then drain again so workers registered since are covered. A CRASHED actor stops the run: revert it (kubectl ate revert) or pass --revert-crashed.",
				Timeout: cfg.SuspendTimeout,
				Done: func(f nodeFacts) (bool, string) {
					if f.flipped() {
						return true, "node at " + f.cfg.To
					}
					live, crashed := f.residents()
					if len(live)+len(crashed) == 0 && len(f.undrained()) == 0 {
						return true, "no actor lives on the node"
					}
					return false, fmt.Sprintf("%d live and %d crashed actor(s) on the node", len(live), len(crashed))
				},
				Plan: func(f nodeFacts) []runbook.Change {
					live, crashed := f.residents()
					var out []runbook.Change
					for _, a := range live {
						out = append(out, runbook.Change{Object: "actor/" + a.Atespace + "/" + a.Name, Action: "SuspendActor", Detail: string(a.State)})
					}
					for _, a := range crashed {
						out = append(out, runbook.Change{Object: "actor/" + a.Atespace + "/" + a.Name, Action: "blocked", Detail: "CRASHED: needs RevertActor"})
					}
					return out
				},
				Act: func(ctx context.Context, f nodeFacts) error { return emptyNode(ctx, api, rec, f) },
			},
			{
				ID: "ate.node.flip", Title: "Flip the node's version label",
				Doc: "Set ate.dev/substrate-version to the target version. The old atelet pod leaves on its own and the new one starts.",
				Done: func(f nodeFacts) (bool, string) {
					return f.flipped(), VersionLabel + "=" + f.node.Labels[VersionLabel]
				},
				Guards: []runbook.Guard[nodeFacts]{
					{Name: "every worker on the node is draining", Check: func(f nodeFacts) (bool, string) {
						return len(f.undrained()) == 0, fmt.Sprintf("%d worker(s) on the node are not draining", len(f.undrained()))
					}},
					{Name: "no actor lives on the node", Check: func(f nodeFacts) (bool, string) {
						live, crashed := f.residents()
						return len(live)+len(crashed) == 0, fmt.Sprintf("%d actor(s) still live on the node", len(live)+len(crashed))
					}},
				},
				Plan: func(f nodeFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.node.Name, Action: "label", Detail: VersionLabel + "=" + f.cfg.To}}
				},
				Act: func(ctx context.Context, f nodeFacts) error {
					n, err := kube.SetNodeKeys(ctx, cs, f.node.Name, kube.NodeChange{Labels: map[string]*string{VersionLabel: ptr.To(f.cfg.To)}})
					if err == nil {
						rec.Record(ctx, kube.NodeRef(n), false, "SubstrateVersionFlipped", fmt.Sprintf("%s: %s → %s", VersionLabel, f.cfg.From, f.cfg.To))
					}
					return err
				},
			},
			{
				ID: "ate.node.atelet-ready", Title: "Wait for the atelet of the target version",
				Doc:     "Wait until the target version's atelet pod on the node is Ready. It stays Pending while the old one exits, because the old one holds the node's host ports.",
				Timeout: cfg.AteletTimeout,
				Done: func(f nodeFacts) (bool, string) {
					if !f.flipped() {
						return false, "node not flipped yet"
					}
					return f.ateletReady()
				},
				Act: func(context.Context, nodeFacts) error { return nil },
				Wait: func(ctx context.Context, f nodeFacts) error {
					_, err := kube.WaitForDaemonSetPodReady(ctx, cs, Namespace, f.cfg.ToAtelet, f.node.Name)
					if err != nil && ctx.Err() != nil {
						return fmt.Errorf("the %s atelet on %s is not Ready: %w. If its log says the image cache \"has layout version\" it does not support, clear /var/lib/ate/image-cache on the node (kubectl debug node/%s --image=busybox -- rm -rf /host/var/lib/ate/image-cache) and delete the atelet pod", f.cfg.To, f.node.Name, context.Cause(ctx), f.node.Name)
					}
					return err
				},
			},
			{
				ID: "ate.node.delete-old-pods", Title: "Delete the node's worker pods of the version it left",
				Doc: "Delete the node's pods of the pools pinned to the version the node left. They are empty (every actor was suspended) but still hold capacity; their Deployment cannot put them back on this node any more. Never before the flip: the old pool would reschedule them next to the new atelet.",
				Done: func(f nodeFacts) (bool, string) {
					left := f.podsOf(f.cfg.FromPools)
					return f.flipped() && len(left) == 0, fmt.Sprintf("%d pod(s) of the %s pools on the node", len(left), f.cfg.From)
				},
				Guards: []runbook.Guard[nodeFacts]{{Name: "the node's version label is already the target version", Check: func(f nodeFacts) (bool, string) {
					return f.flipped(), "the node still carries " + VersionLabel + "=" + f.node.Labels[VersionLabel] + "; deleting its worker pods now would bring them straight back next to the other atelet"
				}}},
				Plan: func(f nodeFacts) []runbook.Change {
					var out []runbook.Change
					for _, p := range f.podsOf(f.cfg.FromPools) {
						out = append(out, runbook.Change{Object: "pod/" + p.Namespace + "/" + p.Name, Action: "delete"})
					}
					return out
				},
				Act: func(ctx context.Context, f nodeFacts) error {
					for _, p := range f.podsOf(f.cfg.FromPools) {
						err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
						if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
							return fmt.Errorf("delete %s/%s: %w", p.Namespace, p.Name, err)
						}
						rec.Record(ctx, kube.PodRef(&p), false, "OldWorkerDeleted", fmt.Sprintf("node %s moved to %s; its %s worker pod is no longer needed", f.node.Name, f.cfg.To, f.cfg.From))
					}
					return nil
				},
				Wait: func(ctx context.Context, f nodeFacts) error {
					from := poolSet(f.cfg.FromPools)
					return kube.WaitForNoPods(ctx, cs, f.node.Name, func(p *corev1.Pod) bool {
						pool, ok := p.Labels[PoolLabel]
						return ok && from[p.Namespace+"/"+pool]
					})
				},
			},
			{
				ID: "ate.node.verify", Title: "Verify the node serves the target version",
				Doc:     "Confirm no pod of the pools the node left remains there, and that every pod of the target version's pools on the node is Ready and registered as an ACTIVE worker. (Pods of the target pools may all run on nodes moved earlier: the scheduler, not the roll, places them.)",
				Timeout: cfg.VerifyTimeout,
				Done: func(f nodeFacts) (bool, string) {
					if !f.flipped() || len(f.podsOf(f.cfg.FromPools)) > 0 {
						return false, "not moved yet"
					}
					ready, total := f.toPodsReady()
					active := f.toWorkersActive()
					return ready == total && active >= ready, fmt.Sprintf("%d of %d %s worker pod(s) on the node Ready, %d registered ACTIVE", ready, total, f.cfg.To, active)
				},
				Act: func(context.Context, nodeFacts) error { return nil },
				Wait: func(ctx context.Context, f nodeFacts) error {
					// The pods are watched; the substrate API has no watch, so
					// registration is polled, gently.
					to := poolSet(f.cfg.ToPools)
					if err := kube.WaitForNoPods(ctx, cs, f.node.Name, func(p *corev1.Pod) bool {
						pool, ok := p.Labels[PoolLabel]
						return ok && to[p.Namespace+"/"+pool] && !kube.PodReady(p)
					}); err != nil {
						return fmt.Errorf("%s worker pods on %s are not Ready: %w", f.cfg.To, f.node.Name, err)
					}
					pods, err := kube.PodsOnNode(ctx, cs, f.node.Name)
					if err != nil {
						return err
					}
					g := f
					g.pods = pods
					want, _ := g.toPodsReady()
					for delay := 100 * time.Millisecond; ; delay = min(2*delay, 3*time.Second) {
						if g.inv, err = api.Inventory(ctx); err != nil {
							return err
						}
						if g.toWorkersActive() >= want {
							return nil
						}
						select {
						case <-ctx.Done():
							return fmt.Errorf("%d %s worker pod(s) on %s Ready but only %d registered ACTIVE: %w", want, f.cfg.To, f.node.Name, g.toWorkersActive(), context.Cause(ctx))
						case <-time.After(delay):
						}
					}
				},
			},
		},
	}
}

func drainWorkers(ctx context.Context, api API, rec kube.Recorder, node *corev1.Node, workers []ateapi.Worker) error {
	for _, w := range workers {
		if _, err := api.DrainWorker(ctx, w.Name); err != nil && !errors.Is(err, ateapi.ErrNotFound) {
			return fmt.Errorf("drain worker %s (pod %s): %w", w.Name, w.Pod, err)
		}
		rec.Record(ctx, kube.NodeRef(node), false, "WorkerDrained", fmt.Sprintf("DrainWorker %s (pod %s, pool %s): no new actors will be placed there", w.Name, w.Pod, w.Pool))
	}
	return nil
}

// emptyNode suspends residents until none is left, then re-drains.
func emptyNode(ctx context.Context, api API, rec kube.Recorder, f nodeFacts) error {
	for round := 1; ; round++ {
		// Workers registered since the last pass must stop taking actors too.
		if err := drainWorkers(ctx, api, rec, f.node, f.undrained()); err != nil {
			return err
		}
		live, crashed := f.residents()
		if len(crashed) > 0 {
			if !f.cfg.RevertCrashed {
				return runbook.Blocked(fmt.Errorf("%s; no further actor is touched. Revert them (`kubectl ate revert ACTOR -a ATESPACE`, loses work since their last snapshot) or re-run with --revert-crashed", describeCrashed(crashed)))
			}
			for _, a := range crashed {
				if _, err := api.RevertActor(ctx, a.Atespace, a.Name); err != nil {
					return fmt.Errorf("revert crashed actor %s/%s: %w", a.Atespace, a.Name, err)
				}
				rec.Record(ctx, kube.NodeRef(f.node), true, "ActorReverted", fmt.Sprintf("reverted CRASHED actor %s/%s to its last external snapshot (--revert-crashed)", a.Atespace, a.Name))
			}
		}
		if len(live) == 0 && len(crashed) == 0 {
			return nil
		}
		if err := suspendAll(ctx, api, rec, f, live); err != nil {
			return err
		}
		inv, err := api.Inventory(ctx)
		if err != nil {
			return err
		}
		f.inv = inv
		if round > 1 {
			select { // actors keep waking: give the router a moment
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Duration(min(round, 10)) * 100 * time.Millisecond):
			}
		}
	}
}

func suspendAll(ctx context.Context, api API, rec kube.Recorder, f nodeFacts, actors []ateapi.Actor) error {
	sem := make(chan struct{}, max(1, f.cfg.MaxConcurrentSuspends))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i, a := range actors {
		if i > 0 && f.cfg.SuspendInterval > 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(f.cfg.SuspendInterval):
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := api.SuspendActor(ctx, a.Atespace, a.Name)
			var ae *ateapi.Error
			switch {
			case err == nil:
				rec.Record(ctx, kube.NodeRef(f.node), false, "ActorSuspended", fmt.Sprintf("suspended %s/%s (was %s) before moving node %s", a.Atespace, a.Name, a.State, f.node.Name))
			case errors.Is(err, ateapi.ErrNotFound):
			case errors.As(err, &ae) && ae.ActorState != "" && ae.ActorState != ateapi.ActorCrashed:
				// Mid-transition (resuming, suspending…): the next round sees it again.
			default:
				mu.Lock()
				errs = append(errs, fmt.Errorf("suspend %s/%s: %w", a.Atespace, a.Name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, ateapi.ErrFailedPrecondition) || errors.Is(err, ateapi.ErrDataLoss) {
			continue // crashed: the next round reports it with the others
		}
		return err
	}
	return nil
}

func describeCrashed(actors []ateapi.Actor) string {
	var names []string
	for _, a := range actors {
		s := a.Atespace + "/" + a.Name
		if a.CrashMessage != "" {
			s += " (" + a.CrashMessage + ")"
		}
		names = append(names, s)
	}
	sort.Strings(names)
	return fmt.Sprintf("%d CRASHED actor(s) on the node: %s", len(actors), strings.Join(names, ", "))
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
