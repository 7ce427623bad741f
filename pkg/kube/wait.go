package kube

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// ErrGone is returned by a wait whose object was deleted.
var ErrGone = errors.New("object was deleted")

// waitFor lists then watches the objects lw selects (resuming the watch
// across disconnects) until cond holds for the event's object. It returns
// the object that satisfied cond. precondition, if set, is asked once the
// list is in: it can end the wait (done or an error) on what the list holds.
func waitFor[T runtime.Object](ctx context.Context, lw cache.ListerWatcher, proto T,
	precondition watchtools.PreconditionFunc, cond func(obj T, deleted bool) (bool, error)) (T, error) {
	var zero T
	ev, err := watchtools.UntilWithSync(ctx, lw, proto, precondition, func(e watch.Event) (bool, error) {
		obj, ok := e.Object.(T)
		if !ok {
			return false, nil
		}
		return cond(obj, e.Type == watch.Deleted)
	})
	if err != nil {
		if errors.Is(err, watchtools.ErrWatchClosed) || ctx.Err() != nil {
			return zero, fmt.Errorf("%w", context.Cause(ctx))
		}
		return zero, err
	}
	return ev.Object.(T), nil
}

// FieldSelectedLW lists and watches only the objects fieldSelector selects:
// the one list-watch every wait here (and the plugins' own watches) use, so
// a wait costs what its objects cost, not what the cluster holds.
func FieldSelectedLW(list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), fieldSelector string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fieldSelector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fieldSelector
			return watchFn(ctx, o)
		},
	}
}

// listed is the precondition of a wait for one named object: absent from
// the list (or there only as the object it replaces), it was deleted before
// the wait began, by anyone, and waiting on would wait out the budget for an
// object that will not come back.
func listed(kind, ns, name string, replaced types.UID) watchtools.PreconditionFunc {
	return func(store cache.Store) (bool, error) {
		for _, o := range store.List() {
			if m, err := meta.Accessor(o); err == nil && m.GetName() == name && (replaced == "" || m.GetUID() != replaced) {
				return false, nil
			}
		}
		return false, fmt.Errorf("%s %s/%s: %w", kind, ns, name, ErrGone)
	}
}

func nameSelected(name string, list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	w func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return FieldSelectedLW(list, w, fields.OneTermEqualSelector("metadata.name", name).String())
}

// WaitForPod watches one pod until cond holds. A deleted pod ends the wait
// with ErrGone unless cond accepts it.
func WaitForPod(ctx context.Context, cs kubernetes.Interface, ns, name string, cond func(p *corev1.Pod) bool) (*corev1.Pod, error) {
	return WaitForPodReplacing(ctx, cs, ns, name, "", cond)
}

// WaitForPodReplacing is WaitForPod for a pod created in place of an
// earlier one of the same name (UID replaced): what the watch still shows of
// that one — its deletion may reach a watch started after the new pod's
// creation — is not the new pod's.
func WaitForPodReplacing(ctx context.Context, cs kubernetes.Interface, ns, name string, replaced types.UID,
	cond func(p *corev1.Pod) bool) (*corev1.Pod, error) {
	pods := cs.CoreV1().Pods(ns)
	lw := nameSelected(name,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		pods.Watch)
	return waitFor(ctx, lw, &corev1.Pod{}, listed("pod", ns, name, replaced), func(p *corev1.Pod, deleted bool) (bool, error) {
		if replaced != "" && p.UID == replaced {
			return false, nil
		}
		if deleted {
			return false, fmt.Errorf("pod %s/%s: %w", ns, name, ErrGone)
		}
		return cond(p), nil
	})
}

// WaitForPodGone watches until the pod no longer exists.
func WaitForPodGone(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	_, err = WaitForPod(ctx, cs, ns, name, func(*corev1.Pod) bool { return false })
	if errors.Is(err, ErrGone) {
		return nil
	}
	return err
}

// PodReady reports the pod's Ready condition.
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodTerminal reports whether the pod has finished, successfully or not.
func PodTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// WaitForDaemonSetPodReady watches the pods on node until one owned by the
// DaemonSet ns/name is Ready, and returns it.
func WaitForDaemonSetPodReady(ctx context.Context, cs kubernetes.Interface, ns, name, node string) (*corev1.Pod, error) {
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	lw := PodsOnNodeLW(cs, ns, node)
	return waitFor(ctx, lw, &corev1.Pod{}, nil, func(p *corev1.Pod, deleted bool) (bool, error) {
		return !deleted && OwnedBy(p, ds.UID) && PodReady(p), nil
	})
}

// OwnedBy reports whether uid is p's controller.
func OwnedBy(p *corev1.Pod, uid types.UID) bool {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.UID == uid {
			return true
		}
	}
	return false
}

// WaitForDeploymentAvailable watches the Deployment until its current
// generation is observed and every desired replica is updated and available.
func WaitForDeploymentAvailable(ctx context.Context, cs kubernetes.Interface, ns, name string) (*appsv1.Deployment, error) {
	deps := cs.AppsV1().Deployments(ns)
	lw := nameSelected(name,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return deps.List(ctx, o) },
		deps.Watch)
	gone := listed("deployment", ns, name, "")
	return waitFor(ctx, lw, &appsv1.Deployment{}, gone, func(d *appsv1.Deployment, deleted bool) (bool, error) {
		if deleted {
			return false, fmt.Errorf("deployment %s/%s: %w", ns, name, ErrGone)
		}
		return DeploymentAvailable(d), nil
	})
}

// DeploymentAvailable reports a Deployment fully rolled out and available.
func DeploymentAvailable(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
}

// WaitForNoPods watches the pods on node until none is left that match
// (terminal and deleted pods never match; terminating ones still count,
// as they may still hold what the caller waits for), and returns nil then.
func WaitForNoPods(ctx context.Context, cs kubernetes.Interface, node string, match func(*corev1.Pod) bool) error {
	_, err := WaitForNoPodsOrArrivals(ctx, cs, node, match, nil)
	return err
}

// WaitForNoPodsOrArrivals is WaitForNoPods that also returns, early, the
// matching pods arrived reports (nil: none): pods bound to the node after
// the caller evicted its own — by a scheduler whose view lagged the
// cordon, or tolerating it — which nothing else would move, so the caller
// evicts them too and waits again.
func WaitForNoPodsOrArrivals(ctx context.Context, cs kubernetes.Interface, node string, match,
	arrived func(*corev1.Pod) bool) ([]corev1.Pod, error) {
	lw := PodsOnNodeLW(cs, metav1.NamespaceAll, node)
	// Track the matching pods by UID; the condition sees one event at a time.
	left := map[types.UID]bool{}
	var arrivals []corev1.Pod
	see := func(p *corev1.Pod, gone bool) {
		switch {
		case gone || PodTerminal(p) || !match(p):
			delete(left, p.UID)
		default:
			left[p.UID] = true
			if arrived != nil && arrived(p) {
				arrivals = append(arrivals, *p)
			}
		}
	}
	done := func() bool { return len(left) == 0 || len(arrivals) > 0 }
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, func(store cache.Store) (bool, error) {
		for _, o := range store.List() {
			see(o.(*corev1.Pod), false)
		}
		return done(), nil
	}, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		see(p, e.Type == watch.Deleted)
		return done(), nil
	})
	if err != nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return arrivals, err
}

// PodsOnNodeLW lists and watches the pods of ns bound to node.
func PodsOnNodeLW(cs kubernetes.Interface, ns, node string) cache.ListerWatcher {
	pods := cs.CoreV1().Pods(ns)
	return FieldSelectedLW(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		pods.Watch, fields.OneTermEqualSelector("spec.nodeName", node).String())
}

// NodeReady reports the node's Ready condition.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
