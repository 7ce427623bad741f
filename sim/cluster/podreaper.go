package cluster

import (
	"context"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// reapDeletedPods finishes the deletion of pods on the fake nodes, as a
// kubelet does once a pod's containers are stopped: a grace-0 delete with
// the pod's UID as precondition. kwok's own pod-delete stage deletes by name
// alone, so a late delete of a gone pod could remove a new pod created under
// the same name (a replaced helper, a StatefulSet pod): no kubelet does that.
func reapDeletedPods(ctx context.Context, cs kubernetes.Interface) error {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	}))
	inf := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "sim-pod-reaper"})
	defer q.ShutDown()
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
			q.Add(p.Namespace + "/" + p.Name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil
	}
	go func() { <-ctx.Done(); q.ShutDown() }()
	lister := inf.Lister()
	for {
		key, quit := q.Get()
		if quit {
			return nil
		}
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		p, err := lister.Pods(ns).Get(name)
		if err == nil && p.DeletionTimestamp != nil {
			err = cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
				GracePeriodSeconds: new(int64),
				Preconditions:      metav1.NewUIDPreconditions(string(p.UID)),
			})
		}
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or the name now belongs to another pod: its own events bring it here.
			q.Forget(key)
		case ctx.Err() == nil:
			log.Printf("sim-pod-reaper: delete %s: %v (retrying)", key, err)
			q.AddRateLimited(key)
		}
		q.Done(key)
	}
}
