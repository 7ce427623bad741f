package cluster

import (
	"context"
	"log"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/sim/podloop"
)

// reapDeletedPods finishes the deletion of pods on the fake nodes, as a
// kubelet does once a pod's containers are stopped: a grace-0 delete with
// the pod's UID as precondition. kwok's own pod-delete stage deletes by name
// alone, so a late delete of a gone pod could remove a new pod created under
// the same name (a replaced helper, a StatefulSet pod): no kubelet does that.
func reapDeletedPods(ctx context.Context, cs kubernetes.Interface) error {
	nf := informers.NewSharedInformerFactory(cs, 0)
	nodes := nf.Core().V1().Nodes().Lister()
	nf.Start(ctx.Done())
	nf.WaitForCacheSync(ctx.Done())
	c := &podloop.Controller{
		Name: "sim-pod-reaper", Client: cs, Logf: log.Printf, SyncTimeout: apiCallTimeout,
		Tweak: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		},
		Sync: func(ctx context.Context, key string, pods corelisters.PodLister) error {
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				return nil
			}
			p, err := pods.Pods(ns).Get(name)
			if err != nil || p.DeletionTimestamp == nil {
				return nil // gone, or not being deleted
			}
			// Only the node's kubelet finishes a deletion: on a node whose
			// kubelet is down the pod stays Terminating until it is back.
			// (Finalizers keep it too: a grace-0 delete does not remove them.)
			if n, err := nodes.Get(p.Spec.NodeName); err == nil && n.Labels[NotReadyLabel] == "true" {
				return podloop.RetryAfter{D: time.Second, Why: "node " + n.Name + " is down"}
			}
			// The containers may take a while to exit on SIGTERM, never past
			// the grace period (deletionTimestamp: the kubelet kills them then).
			if d, why := exitingFor(p); d > 0 && time.Now().Before(p.DeletionTimestamp.Time) {
				return podloop.RetryAfter{D: min(d, time.Until(p.DeletionTimestamp.Time), time.Second), Why: why}
			}
			err = cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
				GracePeriodSeconds: new(int64),
				Preconditions:      metav1.NewUIDPreconditions(string(p.UID)),
			})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return nil // gone, or the name is another pod's now: its own events bring it here
			}
			return err
		},
	}
	return c.Run(ctx)
}

// An ExitHold says how much longer a deleted pod's containers take to exit
// after SIGTERM (0: they are gone), and why: an atelet draining, an ateom
// holding its actors' eviction window. The kubelet finishes the deletion
// once no hold is left, or at the pod's deletionTimestamp (the end of its
// grace period) at the latest.
type ExitHold func(p *corev1.Pod) (time.Duration, string)

var exitHolds struct {
	sync.Mutex
	fs []ExitHold
}

// HoldExits adds h to the holds every deleted pod is checked against (the
// simulated substrate registers its atelet and ateom behaviour).
func HoldExits(h ExitHold) {
	exitHolds.Lock()
	defer exitHolds.Unlock()
	exitHolds.fs = append(exitHolds.fs, h)
}

func exitingFor(p *corev1.Pod) (time.Duration, string) {
	exitHolds.Lock()
	fs := exitHolds.fs
	exitHolds.Unlock()
	for _, h := range fs {
		if d, why := h(p); d > 0 {
			return d, why
		}
	}
	return 0, ""
}

// DeletionRequested is when the pod's deletion was asked for, at the
// latest: the kubelet sends SIGTERM then, and deletionTimestamp is that plus
// the grace period. The API keeps it to the second, truncated, so the end of
// that second is taken: a window counted from it never ends early.
func DeletionRequested(p *corev1.Pod) time.Time {
	if p.DeletionTimestamp == nil {
		return time.Time{}
	}
	t := p.DeletionTimestamp.Time
	if g := p.DeletionGracePeriodSeconds; g != nil {
		t = t.Add(-time.Duration(*g) * time.Second)
	}
	if t.Equal(t.Truncate(time.Second)) {
		t = t.Add(time.Second - time.Millisecond)
	}
	return t
}

// apiCallTimeout bounds a sim controller's sync that only calls the API.
const apiCallTimeout = 30 * time.Second
