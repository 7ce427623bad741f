package cluster

import (
	"context"
	"log"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
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
	c := &podloop.Controller{
		Name: "sim-pod-reaper", Client: cs, Logf: log.Printf,
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
