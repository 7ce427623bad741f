package kube

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Recorder is told about every mutation rollbook makes.
type Recorder interface {
	// Record reports that rollbook did something to obj and why. Warning
	// marks something a human should look at.
	Record(ctx context.Context, obj corev1.ObjectReference, warning bool, reason, message string)
}

// EventWriter creates a core/v1 Event for each record, so `kubectl describe`
// and `kubectl get events` show what rollbook did.
type EventWriter struct {
	Client kubernetes.Interface
	// Component is the reporting component, e.g. "kubectl-tt".
	Component string
	// Instance identifies this run, e.g. its run ID.
	Instance string

	// Set by Start: Events are posted in order by one goroutine.
	mu     sync.Mutex
	queue  chan queuedEvent
	done   chan struct{}
	closed bool
}

// eventQueue bounds the Events waiting to be posted; a run that records
// faster than the API takes them waits (none is dropped).
const eventQueue = 512

// queuedEvent keeps the recording context's values (a paced request stays
// counted as one), not its cancellation.
type queuedEvent struct {
	ctx context.Context
	ev  *corev1.Event
}

// Start makes Record queue its Event and return, so a step's mutation is
// not followed by one POST per record on a parallel roll's critical path (a
// cordon's two are inside the section where cordons decide one at a time;
// a node's label write records three before its slot is given back). One
// goroutine posts them in order; Close waits for them. The window a SIGKILL
// can lose is the queue's, a POST or two: the journal and the terminal
// still have every record. Idempotent; after Close, Record posts at once.
func (w *EventWriter) Start() *EventWriter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queue != nil {
		return w // started already
	}
	w.queue, w.done = make(chan queuedEvent, eventQueue), make(chan struct{})
	go func() {
		defer close(w.done)
		for q := range w.queue {
			w.post(q.ctx, q.ev)
		}
	}()
	return w
}

// Close posts what is queued, waiting at most until ctx ends, and makes
// Record post at once again. It is a no-op without Start.
func (w *EventWriter) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.queue == nil {
		w.mu.Unlock()
		return nil
	}
	if !w.closed {
		w.closed = true
		close(w.queue)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d Event(s) not written: %w", len(w.queue), ctx.Err())
	}
}

// Record implements Recorder. An event that cannot be written is not worth
// failing a step for: the mutation already happened and is printed.
// Rollbook's own helper pods get none: they are not the user's objects, the
// cluster's own Scheduled/Started events cover them, and the terminal and the
// run history still record them (two requests per helper saved).
func (w *EventWriter) Record(ctx context.Context, obj corev1.ObjectReference, warning bool, reason, message string) {
	if IsHelperReason(reason) && !warning {
		return
	}
	ns := obj.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	now := ServerNow() // read beside other machines' Events
	host, _ := os.Hostname()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: fmt.Sprintf("%s.", obj.Name),
			Namespace:    ns,
		},
		InvolvedObject:      obj,
		Reason:              reason,
		Message:             message,
		Type:                typ,
		Source:              corev1.EventSource{Component: w.Component, Host: host},
		FirstTimestamp:      metav1.NewTime(now),
		LastTimestamp:       metav1.NewTime(now),
		Count:               1,
		ReportingController: "rollbook.dev/" + w.Component,
		ReportingInstance:   w.Instance,
		Action:              reason,
	}
	ctx = context.WithoutCancel(ctx)
	w.mu.Lock()
	if w.queue != nil && !w.closed {
		w.queue <- queuedEvent{ctx, ev} // the poster never takes mu: a full queue drains
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.post(ctx, ev)
}

// post writes ev. The mutation already happened: it is recorded even when
// the run was just interrupted, within a short bound of its own.
func (w *EventWriter) post(ctx context.Context, ev *corev1.Event) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = w.Client.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
}

// Reasons of the records about rollbook's own helper pods.
const (
	ReasonHelperStarted = "HelperStarted"
	ReasonHelperDeleted = "HelperDeleted"
)

// IsHelperReason reports a record about a helper pod's own lifecycle.
func IsHelperReason(reason string) bool {
	return reason == ReasonHelperStarted || reason == ReasonHelperDeleted
}

// NodeRef is the object reference of a node, for events.
func NodeRef(n *corev1.Node) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
}

// PodRef is the object reference of a pod, for events.
func PodRef(p *corev1.Pod) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}
