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
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/sim/podloop"
)

// resyncPodReadiness plays the part of a kubelet's status manager that kwok
// leaves out. When a node is not Ready, the node lifecycle controller sets
// Ready=False on its pods (MarkPodsNotReady) and leaves ContainersReady and
// the container statuses alone. A real kubelet, once back, posts the pod's
// status again, Ready computed from its containers and readiness gates; kwok's
// pod-ready stage fires only for a pod without an IP, so without this such a
// pod stayed not Ready forever after its node came back.
func resyncPodReadiness(ctx context.Context, cs kubernetes.Interface) error {
	nf := informers.NewSharedInformerFactory(cs, 0)
	nodes := nf.Core().V1().Nodes().Lister()
	nf.Start(ctx.Done())
	nf.WaitForCacheSync(ctx.Done())
	c := &podloop.Controller{
		Name: "sim-pod-readiness", Client: cs, Logf: log.Printf, SyncTimeout: apiCallTimeout,
		Tweak: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.AndSelectors(
				fields.OneTermNotEqualSelector("spec.nodeName", ""),
				fields.OneTermEqualSelector("status.phase", string(corev1.PodRunning)),
			).String()
		},
		Sync: func(ctx context.Context, key string, pods corelisters.PodLister) error {
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				return nil
			}
			p, err := pods.Pods(ns).Get(name)
			if err != nil || p.DeletionTimestamp != nil || p.Labels[HelperLabel] != "" || !readyOnlyByKubelet(p) {
				return nil // gone, ending, the helper runner's, or nothing to post
			}
			n, err := nodes.Get(p.Spec.NodeName)
			if err != nil {
				return nil
			}
			if n.Labels[NotReadyLabel] == "true" || !nodeReady(n) {
				// The kubelet is down: nothing posts until it is back.
				return podloop.RetryAfter{D: time.Second, Why: "node " + n.Name + " is not Ready"}
			}
			p = p.DeepCopy()
			for i := range p.Status.Conditions {
				if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady {
					c.Status, c.Reason, c.Message = corev1.ConditionTrue, "", ""
					c.LastTransitionTime = metav1.Now()
				}
			}
			_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return nil // gone, or changed: its own event brings it back
			}
			return err
		},
	}
	return c.Run(ctx)
}

// readyOnlyByKubelet is true for a pod whose Ready condition is False although
// everything the kubelet computes it from is true: every container ready,
// ContainersReady True and every readiness gate True. Only the node lifecycle
// controller leaves a pod so.
func readyOnlyByKubelet(p *corev1.Pod) bool {
	cond := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range p.Status.Conditions {
		cond[c.Type] = c.Status
	}
	if cond[corev1.PodReady] != corev1.ConditionFalse || cond[corev1.ContainersReady] != corev1.ConditionTrue {
		return false
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if !s.Ready {
			return false
		}
	}
	for _, g := range p.Spec.ReadinessGates {
		if cond[g.ConditionType] != corev1.ConditionTrue {
			return false
		}
	}
	return true
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
