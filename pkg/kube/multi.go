package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// Recorders sends each record to all of them (e.g. the terminal and Events).
type Recorders []Recorder

// Record implements Recorder.
func (rs Recorders) Record(ctx context.Context, obj corev1.ObjectReference, warning bool, reason, message string) {
	for _, r := range rs {
		r.Record(ctx, obj, warning, reason, message)
	}
}
