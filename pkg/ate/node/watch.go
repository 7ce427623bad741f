package node

import (
	"context"
	"errors"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/rollbook/rollbook/pkg/kube"
)

// podWatch keeps a watch of every pod on a node open in the background
// (one request) and hands out what it shows now: for a wait that also
// polls something else (the inventory), so the pods it ends on are as
// they are then, with no list after the wait.
type podWatch struct {
	mu      sync.Mutex
	pods    []corev1.Pod
	synced  bool
	changed chan struct{} // signalled (not closed) on every change
	done    chan struct{} // closed when the watch ends
	err     error
}

func startPodWatch(ctx context.Context, cs kubernetes.Interface, node string) *podWatch {
	w := &podWatch{changed: make(chan struct{}, 1), done: make(chan struct{})}
	var store cache.Store
	snap := func() {
		items := store.List()
		pods := make([]corev1.Pod, 0, len(items))
		for _, o := range items {
			pods = append(pods, *o.(*corev1.Pod))
		}
		sort.Slice(pods, func(i, j int) bool {
			return pods[i].Namespace < pods[j].Namespace || pods[i].Namespace == pods[j].Namespace && pods[i].Name < pods[j].Name
		})
		w.mu.Lock()
		w.pods, w.synced = pods, true
		w.mu.Unlock()
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(w.done)
		_, err := watchtools.UntilWithSync(ctx, kube.PodsOnNodeLW(cs, metav1.NamespaceAll, node), &corev1.Pod{},
			func(s cache.Store) (bool, error) {
				store = s
				snap()
				return false, nil
			}, func(watch.Event) (bool, error) {
				snap()
				return false, nil
			})
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}()
	return w
}

// now returns the pods the watch shows, once it has listed them; it waits
// for that (or for ctx, or for the watch to fail).
func (w *podWatch) now(ctx context.Context) ([]corev1.Pod, error) {
	for {
		w.mu.Lock()
		pods, synced, err := w.pods, w.synced, w.err
		w.mu.Unlock()
		if synced {
			return pods, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-w.done:
			if err == nil {
				err = errors.New("the watch of the node's pods ended")
			}
			return nil, err
		case <-w.changed:
		}
	}
}

// ended reports whether the watch has stopped.
func (w *podWatch) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// until waits until cond holds for the pods the watch shows and returns
// them.
func (w *podWatch) until(ctx context.Context, cond func([]corev1.Pod) bool) ([]corev1.Pod, error) {
	for {
		pods, err := w.now(ctx)
		if err != nil {
			return nil, err
		}
		if cond(pods) {
			return pods, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-w.done:
		case <-w.changed:
		}
	}
}
