package chaostest

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// NotReadyLabel is the sim's "this node's kubelet is down" mark: while it is
// "true" the sim holds the node NotReady and starts no helper there.
const NotReadyLabel = "sim.rollbook.dev/not-ready"

// SetNotReady sets or removes the sim's not-ready mark on node.
func SetNotReady(ctx context.Context, cs kubernetes.Interface, node string, on bool) error {
	val := "null"
	if on {
		val = `"true"`
	}
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+NotReadyLabel+`":`+val+`}}}`), metav1.PatchOptions{})
	return err
}

// DownAfterCordon marks NotReady the first node rollbook cordons, and sends
// its name ("" when ctx ended first).
func DownAfterCordon(t *testing.T, ctx context.Context, cs kubernetes.Interface) <-chan string {
	t.Helper()
	downed := make(chan string, 1)
	go func() {
		var name string
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, n := range l.Items {
				if n.Spec.Unschedulable && n.Annotations[kube.AnnCordonedBy] != "" {
					name = n.Name
					return true, nil
				}
			}
			return false, nil
		})
		if err == nil {
			if err = SetNotReady(ctx, cs, name, true); err != nil {
				t.Errorf("mark %s not ready: %v", name, err)
			}
		}
		downed <- name
	}()
	return downed
}

// BackUp removes node's not-ready mark and waits until it is Ready again.
func BackUp(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string) {
	t.Helper()
	if err := SetNotReady(ctx, cs, node, false); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && kube.NodeReady(n), nil
	}); err != nil {
		t.Fatalf("%s did not become Ready again: %v", node, err)
	}
}
