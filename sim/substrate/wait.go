package substrate

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WaitPoolsReady watches the WorkerPools of a namespace until each named
// pool reports READY == DESIRED (a missing readyReplicas counts as 0).
func WaitPoolsReady(ctx context.Context, dyn dynamic.Interface, namespace string, names ...string) error {
	ri := dyn.Resource(GVRWorkerPool).Namespace(namespace)
	lw := &cache.ListWatch{
		ListFunc:  func(o metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return ri.Watch(ctx, o) },
	}
	ready := map[string]bool{}
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		p, err := PoolFromUnstructured(u)
		if err != nil {
			return false, err
		}
		ready[p.Name] = ev.Type != watch.Deleted && p.Status.ReadyReplicas == p.Spec.Replicas
		for _, n := range names {
			if !ready[n] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("WorkerPools %v in %s not READY==DESIRED: %w", names, namespace, err)
	}
	return nil
}
