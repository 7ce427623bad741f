package kube

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
)

// RecordIfApplied keeps the record of a write that failed only because the
// run was interrupted mid-request, or its answer was lost (AnswerLost): the
// server may have applied it all the same, and then what this run did must
// not go unrecorded (the run observes again, finds it done and writes
// nothing more). applied looks (on a short context of its own) whether the
// write is in effect and which object it names; if so the record is written
// with the cause noted. err is returned unchanged.
func RecordIfApplied(ctx context.Context, err error, rec Recorder, reason, message string,
	applied func(ctx context.Context) (corev1.ObjectReference, bool)) error {
	if err == nil || (ctx.Err() == nil && !AnswerLost(err)) {
		return err
	}
	note := " (as the run was interrupted)"
	if ctx.Err() == nil {
		note = " (its answer was lost: " + err.Error() + ")"
	}
	check, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ref, ok := applied(check); ok {
		rec.Record(check, ref, false, reason, message+note)
	}
	return err
}

// AnswerLost reports an error after which a write may have been applied
// though no answer said so: the connection dropped or timed out after the
// request was sent.
func AnswerLost(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
// interrupted, or the answer lost, while the server applied it (the node
// shows all of it). The
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
		if len(records) == 0 || (ctx.Err() == nil && !AnswerLost(err)) {
			return nil, err
		}
		note := " (as the run was interrupted)"
		if ctx.Err() == nil {
			note = " (its answer was lost: " + err.Error() + ")"
		}
		check, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if got, gerr := cs.CoreV1().Nodes().Get(check, cur.Name, metav1.GetOptions{}); gerr == nil && sent.NoOpOn(got) {
			for _, r := range records {
				rec.Record(check, NodeRef(got), false, r.Reason, r.Message+note)
			}
		}
		return nil, err
	}
	for _, r := range records {
		rec.Record(ctx, NodeRef(n), false, r.Reason, r.Message)
	}
	return n, nil
}
