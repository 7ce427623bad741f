package kube

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/rollbook/rollbook/internal/simtest"
)

// A started EventWriter queues what it records; Close returns once every
// record is an Event, and a record after Close is posted at once.
func TestEventWriterQueuesAndCloseWaits(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	obj := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: fmt.Sprintf("queued-%d", time.Now().UnixNano())}
	events := func() int {
		t.Helper()
		l, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", obj.Name).String()})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	w := (&EventWriter{Client: c.Client, Component: "kubectl-tt", Instance: "test"}).Start().Start()
	const n = 30
	for i := range n {
		w.Record(ctx, obj, false, "Queued", fmt.Sprintf("record %d", i))
	}
	w.Record(ctx, obj, false, ReasonHelperStarted, "a helper's own start is no Event")
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := events(); got != n {
		t.Fatalf("after Close: %d Events, want %d", got, n)
	}
	w.Record(ctx, obj, true, "AfterClose", "posted at once")
	if got := events(); got != n+1 {
		t.Fatalf("a record after Close: %d Events, want %d", got, n+1)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if err := (&EventWriter{Client: c.Client}).Close(context.Background()); err != nil {
		t.Fatalf("Close of a writer never started: %v", err)
	}
}
