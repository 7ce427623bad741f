package tt

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// watchNodeDown cancels ctx with a *kube.NodeNotReadyError once helper
// ns/name is still Pending while its node has been NotReady for a few
// seconds: a helper bound to a node whose kubelet is down never starts.
func watchNodeDown(ctx context.Context, cancel context.CancelCauseFunc, cs kubernetes.Interface, ns, name string) {
	kube.CancelOnNodeDown(ctx, cancel, cs, func(ctx context.Context) string {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodPending {
			return ""
		}
		return p.Spec.NodeName
	})
}

// asNodeDown returns the node-down cause of a wait that ctx ended.
func asNodeDown(ctx context.Context) (*kube.NodeNotReadyError, bool) {
	var nd *kube.NodeNotReadyError
	ok := errors.As(context.Cause(ctx), &nd)
	return nd, ok
}
