package chaostest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/kube"
)

// NoNodeLeftCordoned fails t for every node that is cordoned, carries
// rollbook's cordon bookkeeping, or a left-cordoned note.
func NoNodeLeftCordoned(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || n.Annotations[kube.AnnCordonedBy] != "" || n.Annotations[kube.AnnLeftCordoned] != "" {
			t.Errorf("%s left cordoned: unschedulable %v, cordoned-by %q, left-cordoned %q", n.Name, n.Spec.Unschedulable,
				n.Annotations[kube.AnnCordonedBy], n.Annotations[kube.AnnLeftCordoned])
		}
	}
}

// NoHelperPodLeft fails t for every rollbook helper pod still present.
func NoHelperPodLeft(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("helper pod %s/%s (%s) left behind", p.Namespace, p.Name, p.Labels[kube.LabelHelper])
		}
	}
}

// HostOps returns the operations the simulated tt host of node recorded
// (sim/tthost keeps one fakehost root per node under DIR/hosts).
func HostOps(simDir, node string) ([]fakehost.Op, error) {
	ops, err := fakehost.Ops(filepath.Join(simDir, "hosts", node))
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", node, err)
	}
	return ops, nil
}
