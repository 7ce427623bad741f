// Package podloop is the informer + work queue loop the sim's fake kubelet
// parts share (the tt helper runner, the holder sync, the pod reaper).
package podloop

import (
	"context"
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Controller queues a pod's key on every event of the pods Tweak selects
// (and every resync), and Sync decides from the pod's current state, so a
// missed or repeated event changes nothing.
type Controller struct {
	Name   string
	Client kubernetes.Interface
	Tweak  func(*metav1.ListOptions)
	Resync time.Duration
	Sync   func(ctx context.Context, key string, pods corelisters.PodLister) error
	Logf   func(format string, a ...any)
	// Workers sync different keys at once (default 1; the queue never
	// hands one key to two workers). Real kubelets act per node in
	// parallel: a single worker would serialise pod starts across nodes.
	Workers int
	// SyncTimeout bounds one Sync (0: none), for a Sync that only calls the
	// API: a request that never returns (sent on a connection an
	// apiserver restart left half-open) must not wedge a worker, and with
	// it every pod on every node; a kubelet's calls time out too. A Sync
	// that starts work outliving it (a helper's run) must not set it.
	SyncTimeout time.Duration
}

// Run syncs until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, c.Resync, informers.WithTweakListOptions(c.Tweak))
	inf := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: c.Name})
	defer q.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	go func() { <-ctx.Done(); q.ShutDown() }()
	var wg sync.WaitGroup
	for range max(c.Workers, 1) {
		wg.Go(func() {
			for c.next(ctx, q, inf.Lister()) {
			}
		})
	}
	wg.Wait()
	return nil
}

// next syncs one key; false once the queue is shut down.
func (c *Controller) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], lister corelisters.PodLister) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	sctx, cancel := ctx, context.CancelFunc(func() {})
	if c.SyncTimeout > 0 {
		sctx, cancel = context.WithTimeout(ctx, c.SyncTimeout)
	}
	err := c.Sync(sctx, key, lister)
	cancel()
	var later RetryAfter
	switch {
	case errors.As(err, &later):
		q.Forget(key)
		q.AddAfter(key, later.D)
	case err != nil && ctx.Err() == nil:
		c.Logf("%s: %s: %v (retrying)", c.Name, key, err)
		q.AddRateLimited(key)
	default:
		q.Forget(key)
	}
	return true
}

// RetryAfter is a sync result that is not a failure: look at the key again
// after D (no backoff growth, no log line).
type RetryAfter struct {
	D   time.Duration
	Why string
}

func (e RetryAfter) Error() string { return e.Why }
