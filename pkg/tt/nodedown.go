package tt

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// A helper bound to a node whose kubelet is down never starts: without this
// check its wait would only end with the step's budget (15 minutes for kmd).
// A helper still Pending on a node NotReady for nodeDownGrace stops the wait.
const (
	nodeDownPoll  = time.Second
	nodeDownGrace = 3 * time.Second
)

// nodeDownError says which node holds a helper that cannot start.
type nodeDownError struct {
	pod *corev1.Pod
	msg string
}

func (e *nodeDownError) Error() string { return e.msg }

// watchNodeDown cancels ctx with a *nodeDownError once helper ns/name is
// still Pending while its node has been NotReady for nodeDownGrace.
func watchNodeDown(ctx context.Context, cancel context.CancelCauseFunc, cs kubernetes.Interface, ns, name string) {
	var since time.Time
	_ = wait.PollUntilContextCancel(ctx, nodeDownPoll, false, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodPending {
			since = time.Time{}
			return false, nil
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		why, down := nodeNotReady(n)
		switch {
		case !down:
			since = time.Time{}
			return false, nil
		case since.IsZero():
			since = time.Now()
			return false, nil
		case time.Since(since) < nodeDownGrace:
			return false, nil
		}
		cancel(&nodeDownError{pod: p, msg: fmt.Sprintf("node %s is NotReady (%s) and helper pod %s/%s has not started on it; "+
			"bring the node back (or take it out of the selection) and run the same command again", n.Name, why, ns, name)})
		return true, nil
	})
}

// nodeNotReady reports a node whose Ready condition is not True, and why.
func nodeNotReady(n *corev1.Node) (string, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return "", false
			}
			return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message), true
		}
	}
	return "no Ready condition", true
}

// asNodeDown returns the node-down cause of a wait that ctx ended.
func asNodeDown(ctx context.Context) (*nodeDownError, bool) {
	var nd *nodeDownError
	ok := errors.As(context.Cause(ctx), &nd)
	return nd, ok
}
