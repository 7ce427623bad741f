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

// NodeRecord is one Event a node write stands for.
type NodeRecord struct{ Reason, Message string }

// UpdateNodeRecorded is UpdateNodeFrom whose mutate also names the Events
// its change stands for (one per step whose write it carries), in order.
// They are recorded once the change is in: on success, or when the run was
// interrupted while the server applied it (the node shows all of it). The
// patch's precondition is reads, the keys mutate decides from
// (UpdateNodeKeysFrom), or cur's resourceVersion when reads is nil.
func UpdateNodeRecorded(ctx context.Context, cs kubernetes.Interface, rec Recorder, cur *corev1.Node, reads *NodeKeys,
	mutate func(*corev1.Node) (NodeChange, []NodeRecord)) (*corev1.Node, error) {
	var sent NodeChange
	var records []NodeRecord
	decide := func(n *corev1.Node) (NodeChange, error) {
		sent, records = mutate(n)
		if sent.Empty() || sent.NoOpOn(n) {
			records = nil // nothing is sent: nothing happened to record
		}
		return sent, nil
	}
	var n *corev1.Node
	var err error
	if reads != nil {
		n, err = UpdateNodeKeysFrom(ctx, cs, cur, *reads, decide)
	} else {
		n, err = UpdateNodeFrom(ctx, cs, cur, decide)
	}
	if err != nil {
		if len(records) == 0 || ctx.Err() == nil {
			return nil, err
		}
		check, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if got, gerr := cs.CoreV1().Nodes().Get(check, cur.Name, metav1.GetOptions{}); gerr == nil && sent.NoOpOn(got) {
			for _, r := range records {
				rec.Record(check, NodeRef(got), false, r.Reason, r.Message+" (as the run was interrupted)")
			}
		}
		return nil, err
	}
	for _, r := range records {
		rec.Record(ctx, NodeRef(n), false, r.Reason, r.Message)
	}
	return n, nil
}
