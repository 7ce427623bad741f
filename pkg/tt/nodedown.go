package tt

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// watchNodeDown cancels ctx with a *kube.NodeNotReadyError once the helper
// (its latest state as the caller's watch saw it; nil until then) is still
// Pending while its node has been NotReady for a few seconds: a helper bound
// to a node whose kubelet is down never starts. Only a Pending helper costs
// a read (of its node) each second; a running one costs nothing.
func watchNodeDown(ctx context.Context, cancel context.CancelCauseFunc, cs kubernetes.Interface, helper func() *corev1.Pod) {
	kube.CancelOnNodeDown(ctx, cancel, cs, func(context.Context) string {
		if p := helper(); p != nil && p.Status.Phase == corev1.PodPending {
			return p.Spec.NodeName
		}
		return ""
	})
}

// asNodeDown returns the node-down cause of a wait that ctx ended.
func asNodeDown(ctx context.Context) (*kube.NodeNotReadyError, bool) {
	var nd *kube.NodeNotReadyError
	ok := errors.As(context.Cause(ctx), &nd)
	return nd, ok
}
