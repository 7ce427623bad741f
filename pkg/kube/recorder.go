package kube

import (
	"context"
	"fmt"
	"os"
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
	now := time.Now()
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
	// The mutation already happened: record it even when the run was just
	// interrupted, within a short bound of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = w.Client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
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
