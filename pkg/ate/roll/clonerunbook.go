package roll

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// cloneFacts is the cluster as the clone step sees it.
type cloneFacts struct {
	c     *fleet.Cluster
	plans []ClonePlan
	// deployments per pool name (label ate.dev/worker-pool), and new-pool pods
	// that run (they should all be Pending before the first flip).
	deployments map[string]int
	running     map[string]int
	err         error
}

// CloneRunbook is step 4: clone every serving pool for NEW.
func CloneRunbook(cs kubernetes.Interface, dyn dynamic.Interface, rec kube.Recorder, images Images) *runbook.Runbook[cloneFacts] {
	b := &cloneBuilder{cs: cs, dyn: dyn, rec: rec, images: images}
	return &runbook.Runbook[cloneFacts]{
		Name:  "ate-clone-pools",
		Title: "Clone every serving WorkerPool for the new version",
		Doc: `Step 4 of the runbook: for each pool pinned to OLD, create a clone in the same namespace
with the same labels (the scheduler matches actors by WorkerPool labels) and a full copy of
the spec, with the new worker image (pinned by digest) and the NEW pin. The old pool is never
edited or scaled; limits are never shrunk. Then verify one Deployment per pool and that the
new pools' pods wait (Pending) until a node moves to NEW.`,
		Observe: func(ctx context.Context, _ runbook.Target) (cloneFacts, error) { return b.observe(ctx) },
		Steps:   []runbook.Step[cloneFacts]{b.clone(), b.verify()},
	}
}

// cloneBuilder makes the clone runbook's steps, one method each, over the
// run's clients and the images it clones with.
type cloneBuilder struct {
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	rec    kube.Recorder
	images Images
}

// observe reads the cluster, the plans, the pools' Deployments and the
// clones' Running pods.
func (b *cloneBuilder) observe(ctx context.Context) (cloneFacts, error) {
	c, err := fleet.ObserveCluster(ctx, b.cs, b.dyn)
	if err != nil {
		return cloneFacts{}, err
	}
	f := cloneFacts{c: c, deployments: map[string]int{}, running: map[string]int{}}
	schema, err := fleet.ReadSchema(ctx, b.dyn)
	if err != nil {
		return f, err
	}
	f.plans, f.err = PlanClonesFor(c, b.images, schema)
	deps, err := b.cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
	if err != nil {
		return f, err
	}
	for _, d := range deps.Items {
		f.deployments[d.Namespace+"/"+d.Labels[fleet.PoolLabel]]++
	}
	pods, err := fleet.PoolPods(ctx, b.cs, c.PoolsPinnedTo(c.New))
	if err != nil {
		return f, err
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			f.running[p.Namespace+"/"+p.Labels[fleet.PoolLabel]]++
		}
	}
	return f, nil
}

// clone creates the clone of each pool pinned to OLD that has none.
func (b *cloneBuilder) clone() runbook.Step[cloneFacts] {
	return runbook.Step[cloneFacts]{
		ID: "ate.pools.clone", Title: "Clone the serving pools",
		Doc:  "Create the clone of each pool pinned to OLD that has none; an existing clone is verified, never overwritten.",
		Done: cloned,
		Guards: []runbook.Guard[cloneFacts]{
			{Name: "the roll's shape is known (two atelet DaemonSets, labelled nodes)", Check: func(f cloneFacts) (bool, string) {
				if len(f.c.Problems) > 0 {
					return false, strings.Join(f.c.Problems, "; ")
				}
				if f.err != nil {
					return false, f.err.Error()
				}
				return true, ""
			}},
			{Name: stepTwo, Check: func(f cloneFacts) (bool, string) {
				why := f.c.ControllerBehind()
				return why == "", why + ": the old controller would render the clones; " + stepTwoFix(f.c.New)
			}},
			{Name: "no clone shrinks resource limits", Check: func(f cloneFacts) (bool, string) {
				for _, p := range f.plans {
					if err := CheckLimits(p); err != nil {
						return false, err.Error()
					}
				}
				return true, ""
			}},
		},
		Plan: func(f cloneFacts) []runbook.Change {
			var out []runbook.Change
			for _, p := range f.plans {
				out = append(out, runbook.Change{Object: "workerpool/" + p.From.Namespace + "/" + p.Name, Action: "create",
					Detail: fmt.Sprintf("clone of %s, image %s, pin %s=%s", p.From.Name, p.Image, fleet.VersionLabel, f.c.New)})
			}
			return out
		},
		Act: func(ctx context.Context, f cloneFacts) error {
			for _, p := range f.plans {
				if err := CreateClone(ctx, b.dyn, b.rec, p); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// verify checks one Deployment per pool, the clones' pods waiting.
func (b *cloneBuilder) verify() runbook.Step[cloneFacts] {
	return runbook.Step[cloneFacts]{
		ID: "ate.pools.verify", Title: "Verify one Deployment per pool, new pods waiting",
		Doc: "Each pool has exactly one Deployment (label ate.dev/worker-pool); the clones' pods are Pending while no node is " +
			"at NEW.",
		Done: func(f cloneFacts) (bool, string) {
			for _, p := range f.c.Pools {
				if f.deployments[p.Key()] != 1 {
					return false, fmt.Sprintf("pool %s has %d Deployment(s)", p.Key(), f.deployments[p.Key()])
				}
			}
			if len(f.c.NodesAt(f.c.New)) == 0 {
				for k, n := range f.running {
					return false, fmt.Sprintf("%d pod(s) of new pool %s Running with no node at NEW", n, k)
				}
			}
			return true, fmt.Sprintf("%d pool(s), one Deployment each", len(f.c.Pools))
		},
		Act: func(context.Context, cloneFacts) error { return nil },
		Wait: func(ctx context.Context, f cloneFacts) error {
			for _, p := range f.c.PoolsPinnedTo(f.c.New) {
				if err := waitDeployment(ctx, b.cs, p); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// cloned is the clone step's Done: no pool pinned to OLD is left without
// its clone pinned to NEW.
func cloned(f cloneFacts) (bool, string) {
	return f.err == nil && len(f.plans) == 0, fmt.Sprintf("%d pool(s) to clone", len(f.plans))
}

// Cloned is the clone step's own verdict on c, for those who read where
// the roll stands (status).
func Cloned(c *fleet.Cluster) bool {
	f := cloneFacts{c: c}
	f.plans, f.err = PlanClones(c, Images{})
	done, _ := cloned(f)
	return done
}

// waitDeployment watches until the pool's Deployment exists, for at most
// two minutes (the controller renders it within seconds when it runs).
func waitDeployment(ctx context.Context, cs kubernetes.Interface, p fleet.Pool) error {
	ctx, cancel := context.WithTimeoutCause(ctx, 2*time.Minute, fmt.Errorf("is ate-controller running?"))
	defer cancel()
	sel := fleet.PoolLabel + "=" + p.Name
	w, err := cs.AppsV1().Deployments(p.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	defer w.Stop()
	l, err := cs.AppsV1().Deployments(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err == nil && len(l.Items) > 0 {
		return nil
	}
	select {
	case <-w.ResultChan():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no Deployment for pool %s: %w", p.Key(), context.Cause(ctx))
	}
}
