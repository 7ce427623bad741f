package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// poolManager is the field owner of rendered Deployments, as upstream.
const poolManager = "workerpool-controller"

// poolController renders each WorkerPool into its Deployment and mirrors
// the Deployment's replica counts into the pool's status (§5.2).
type poolController struct {
	dyn   dynamic.Interface
	pools cache.GenericLister
	deps  appslisters.DeploymentLister
	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// applied remembers the pool generation last rendered, so Deployment
	// status churn does not re-apply an unchanged spec.
	applied map[types.UID]int64
}

func newPoolController(dyn dynamic.Interface, inf *watches) *poolController {
	c := &poolController{
		dyn: dyn, pools: inf.pools.Lister(), deps: inf.deps.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "workerpools"}),
		applied: map[types.UID]int64{},
	}
	enqueue := func(obj any) {
		if n, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			c.queue.Add(n)
		}
	}
	// A Deployment is named after its pool, so its key is the pool's key.
	_, _ = inf.pools.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue})
	_, _ = inf.deps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue})
	return c
}

func (c *poolController) run(ctx context.Context) {
	defer c.queue.ShutDown()
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (c *poolController) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		if ctx.Err() == nil {
			utilruntime.HandleError(fmt.Errorf("workerpool %s: %w", key, err))
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *poolController) reconcile(ctx context.Context, key cache.ObjectName) error {
	obj, err := c.pools.ByNamespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil // the Deployment is garbage-collected through its owner reference
	}
	if err != nil {
		return err
	}
	pool, err := poolFromObject(obj)
	if err != nil {
		return err
	}
	dep, err := c.deps.Deployments(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if dep == nil || c.applied[pool.UID] != pool.Generation {
		if dep, err = c.render(ctx, pool); err != nil {
			return err
		}
		c.applied[pool.UID] = pool.Generation
	}
	return c.writeStatus(ctx, pool, PoolStatusFrom(pool.Name, dep))
}

// render server-side-applies the pool's Deployment with ForceOwnership, as
// upstream does, so the controller always wins its own fields.
func (c *poolController) render(ctx context.Context, pool *WorkerPool) (*appsv1.Deployment, error) {
	out, err := apply(ctx, c.dyn, gvrDeployment, RenderDeployment(pool), poolManager)
	if err != nil {
		return nil, err
	}
	dep := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out.Object, dep); err != nil {
		return nil, err
	}
	return dep, nil
}

func (c *poolController) writeStatus(ctx context.Context, pool *WorkerPool, st WorkerPoolStatus) error {
	if pool.Status == st {
		return nil
	}
	// readyReplicas is omitted at 0 upstream; null removes a stale value.
	var ready any
	if st.ReadyReplicas != 0 {
		ready = st.ReadyReplicas
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"replicas": st.Replicas, "readyReplicas": ready, "selector": st.Selector}})
	_, err := c.dyn.Resource(GVRWorkerPool).Namespace(pool.Namespace).
		Patch(ctx, pool.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// poolFromObject decodes what a dynamic lister returns.
func poolFromObject(obj runtime.Object) (*WorkerPool, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in the WorkerPool cache", obj)
	}
	return PoolFromUnstructured(u)
}
