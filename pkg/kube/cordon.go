package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// CordonState says who, if anyone, has the node cordoned.
type CordonState struct {
	Cordoned bool
	// Owner is the runbook that cordoned it ("" when not rollbook's cordon).
	Owner string
	Since string
	Run   string
}

// Foreign reports a cordon that someone other than rollbook put there.
func (s CordonState) Foreign() bool { return s.Cordoned && s.Owner == "" }

// String describes the state for tables and messages.
func (s CordonState) String() string {
	switch {
	case !s.Cordoned:
		return "schedulable"
	case s.Foreign():
		return "cordoned (not by rollbook)"
	default:
		return "cordoned by " + s.Owner
	}
}

// CordonStateOf reads the cordon state of n.
func CordonStateOf(n *corev1.Node) CordonState {
	s := CordonState{Cordoned: n.Spec.Unschedulable}
	if s.Cordoned {
		s.Owner = n.Annotations[AnnCordonedBy]
		s.Since = n.Annotations[AnnCordonedAt]
		s.Run = n.Annotations[AnnCordonRun]
	}
	return s
}

// CordonNode marks the node unschedulable on behalf of owner (a runbook name)
// and records that ownership on the node in the same patch. A node that is
// already cordoned by someone else keeps that foreign cordon and is not
// claimed, so a later UncordonNode by owner leaves it cordoned — the prior
// state is restored. cur is the node as the caller just read it.
func CordonNode(ctx context.Context, cs kubernetes.Interface, rec Recorder, cur *corev1.Node, owner, run string) (CordonState, error) {
	node := cur.Name
	var did bool
	n, err := UpdateNodeFrom(ctx, cs, cur, func(n *corev1.Node) (NodeChange, error) {
		var change NodeChange
		change, did = CordonChange(n, owner, run)
		return change, nil
	})
	if err != nil {
		err = RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "Cordoned", CordonedMessage(owner, run),
			func(n *corev1.Node) bool { return did && CordonedBy(n, owner, run) })
		return CordonState{}, fmt.Errorf("cordon %s: %w", node, err)
	}
	st := CordonStateOf(n)
	if did {
		rec.Record(ctx, NodeRef(n), false, "Cordoned", CordonedMessage(owner, run))
	}
	return st, nil
}

// CordonChange is CordonNode's write on n, and whether there is one: a
// node already unschedulable (anyone's cordon) is left as it is. A caller
// that sends it in a patch of its own records the Cordoned Event
// (CordonedMessage) once it is in.
func CordonChange(n *corev1.Node, owner, run string) (NodeChange, bool) {
	if n.Spec.Unschedulable {
		return NodeChange{}, false
	}
	return NodeChange{
		Unschedulable: ptr.To(true),
		Annotations: map[string]*string{
			AnnCordonedBy: ptr.To(owner),
			AnnCordonedAt: ptr.To(ServerNow().UTC().Format(time.RFC3339)),
			AnnCordonRun:  ptr.To(run),
		},
	}, true
}

// CordonedBy reports n cordoned by owner's run (a cordon write applied).
func CordonedBy(n *corev1.Node, owner, run string) bool {
	st := CordonStateOf(n)
	return st.Owner == owner && st.Run == run
}

// CordonedMessage is the Cordoned Event's message.
func CordonedMessage(owner, run string) string {
	return fmt.Sprintf("cordoned by rollbook %s (run %s)", owner, run)
}

// UncordonNode undoes owner's cordon. A node cordoned by anyone else (another
// runbook, a person, an autoscaler) is left cordoned and reported. cur is
// the node as the caller just read it.
func UncordonNode(ctx context.Context, cs kubernetes.Interface, rec Recorder, cur *corev1.Node, owner string) (CordonState, error) {
	node := cur.Name
	var did bool
	n, err := UpdateNodeFrom(ctx, cs, cur, func(n *corev1.Node) (NodeChange, error) {
		var change NodeChange
		change, did = UncordonChange(n, owner)
		return change, nil
	})
	if err != nil {
		err = RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "Uncordoned", UncordonedMessage(owner),
			func(n *corev1.Node) bool { return did && !n.Spec.Unschedulable })
		return CordonState{}, fmt.Errorf("uncordon %s: %w", node, err)
	}
	if did {
		rec.Record(ctx, NodeRef(n), false, "Uncordoned", UncordonedMessage(owner))
	}
	return CordonStateOf(n), nil
}

// UncordonChange is UncordonNode's write on n: did reports owner's cordon
// lifted (the Uncordoned Event to record, UncordonedMessage); a change
// without it only drops owner's bookkeeping that outlived a cordon someone
// else lifted. Anyone else's cordon gives no change.
func UncordonChange(n *corev1.Node, owner string) (change NodeChange, did bool) {
	st := CordonStateOf(n)
	if !st.Cordoned {
		if by, ok := n.Annotations[AnnCordonedBy]; ok && by == owner {
			return NodeChange{Annotations: clearCordonAnnotations()}, false
		}
		return NodeChange{}, false
	}
	if st.Owner != owner {
		return NodeChange{}, false
	}
	return NodeChange{Unschedulable: ptr.To(false), Annotations: clearCordonAnnotations()}, true
}

// UncordonedMessage is the Uncordoned Event's message.
func UncordonedMessage(owner string) string {
	return fmt.Sprintf("uncordoned by rollbook %s, which had cordoned it", owner)
}

func clearCordonAnnotations() map[string]*string {
	return map[string]*string{AnnCordonedBy: nil, AnnCordonedAt: nil, AnnCordonRun: nil, AnnLeftCordoned: nil}
}

// MarkLeftCordoned records on node why a run that is ending leaves it
// cordoned, if rollbook cordoned it. It reports whether the node is ours and
// cordoned (and so was marked).
func MarkLeftCordoned(ctx context.Context, cs kubernetes.Interface, node, why string) (bool, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if st := CordonStateOf(n); !st.Cordoned || st.Owner == "" {
		return false, nil
	}
	if n.Annotations[AnnLeftCordoned] == why {
		return true, nil
	}
	_, err = SetNodeKeys(ctx, cs, node, NodeChange{Annotations: map[string]*string{AnnLeftCordoned: &why}})
	return err == nil, err
}
