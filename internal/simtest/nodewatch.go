package simtest

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NeverCordoned watches node from now on; the function it returns ends the
// watch and reports whether the node was never cordoned meanwhile (a later
// uncordon would hide it from a final Get).
func (c *Cluster) NeverCordoned(t *testing.T, ctx context.Context, node string) func() bool {
	t.Helper()
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cordoned := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && n.Spec.Unschedulable {
				mu.Lock()
				cordoned = true
				mu.Unlock()
			}
		}
	}()
	return func() bool {
		time.Sleep(500 * time.Millisecond) // the watch's last events
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return !cordoned
	}
}
