package tt

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// StatusRow is one node's row of status from the node and its helper pods
// as a watch delivered them: the same row Status gives, a stalled drain
// explained with the one read it needs (only when stalled).
func StatusRow(ctx context.Context, cs kubernetes.Interface, n *corev1.Node, helpers []corev1.Pod) NodeStatus {
	r := nodeStatus(n, helpers)
	if r.Why == "" && drainStalled(n, helpers, time.Now()) {
		if why, err := explainDrains(ctx, cs, []string{n.Name}); err == nil {
			r.Why = why[n.Name]
		}
	}
	return r
}

// LabelSelector is the label selector of the nodes s covers, as a string
// for a list or a watch.
func (s Selection) LabelSelector() (string, error) {
	sel, err := s.selector()
	if err != nil {
		return "", err
	}
	return sel.String(), nil
}
