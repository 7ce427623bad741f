package tthost

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// podController is the informer + work queue loop shared by the runner and
// the holder sync: every pod event (and every resync) queues the pod's key,
// and sync decides from the pod's current state, so a missed or repeated
// event changes nothing.
type podController struct {
	name   string
	client kubernetes.Interface
	tweak  func(*metav1.ListOptions)
	resync time.Duration
	sync   func(ctx context.Context, key string, pods corelisters.PodLister) error
	logf   func(format string, a ...any)
}

func (c *podController) run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(c.client, c.resync, informers.WithTweakListOptions(c.tweak))
	inf := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: c.name})
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
	lister := inf.Lister()
	for {
		key, quit := q.Get()
		if quit {
			return nil
		}
		err := c.sync(ctx, key, lister)
		var later retryAfter
		switch {
		case errors.As(err, &later):
			q.Forget(key)
			q.AddAfter(key, later.d)
		case err != nil && ctx.Err() == nil:
			c.logf("%s: %s: %v (retrying)", c.name, key, err)
			q.AddRateLimited(key)
		default:
			q.Forget(key)
		}
		q.Done(key)
	}
}

// retryAfter is a sync result that is not a failure: look at the key again
// after d (no backoff growth, no log line).
type retryAfter struct {
	d   time.Duration
	why string
}

func (e retryAfter) Error() string { return e.why }

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func splitKey(key string) (ns, name string, err error) {
	ns, name, err = cache.SplitMetaNamespaceKey(key)
	if err == nil && name == "" {
		err = fmt.Errorf("bad key %q", key)
	}
	return ns, name, err
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
