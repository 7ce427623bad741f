package kube

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RecordIfApplied keeps the record of a write that failed only because the
// run was interrupted mid-request: the server may have applied it all the
// same, and then what this run did must not go unrecorded. When ctx has
// ended, applied looks (on a short context of its own) whether the write
// is in effect and which object it names; if so the record is written with
// the interruption noted. err is returned unchanged.
func RecordIfApplied(ctx context.Context, err error, rec Recorder, reason, message string,
	applied func(ctx context.Context) (corev1.ObjectReference, bool)) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	check, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ref, ok := applied(check); ok {
		rec.Record(check, ref, false, reason, message+" (as the run was interrupted)")
	}
	return err
}

// RecordNodeWriteIfApplied is RecordIfApplied for a write to one node: it
// was applied when the node, read again, shows what the write set (applied).
func RecordNodeWriteIfApplied(ctx context.Context, err error, cs kubernetes.Interface, rec Recorder, node, reason, message string,
	applied func(*corev1.Node) bool) error {
	return RecordIfApplied(ctx, err, rec, reason, message, func(ctx context.Context) (corev1.ObjectReference, bool) {
		n, gerr := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if gerr != nil {
			return corev1.ObjectReference{}, false
		}
		return NodeRef(n), applied(n)
	})
}

// SetNodeKeysRecorded is SetNodeKeys that records the write once it is in
// effect: on success, or when the run was interrupted while the server
// applied it (the node shows everything change sets).
func SetNodeKeysRecorded(ctx context.Context, cs kubernetes.Interface, rec Recorder, node string, change NodeChange,
	reason, message string) (*corev1.Node, error) {
	n, err := SetNodeKeys(ctx, cs, node, change)
	if err != nil {
		return nil, RecordNodeWriteIfApplied(ctx, err, cs, rec, node, reason, message, change.NoOpOn)
	}
	rec.Record(ctx, NodeRef(n), false, reason, message)
	return n, nil
}
