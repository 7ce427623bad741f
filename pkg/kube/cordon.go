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
		did = false
		if n.Spec.Unschedulable {
			return NodeChange{}, nil
		}
		did = true
		return NodeChange{
			Unschedulable: ptr.To(true),
			Annotations: map[string]*string{
				AnnCordonedBy: ptr.To(owner),
				AnnCordonedAt: ptr.To(time.Now().UTC().Format(time.RFC3339)),
				AnnCordonRun:  ptr.To(run),
			},
		}, nil
	})
	message := fmt.Sprintf("cordoned by rollbook %s (run %s)", owner, run)
	if err != nil {
		err = RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "Cordoned", message, func(n *corev1.Node) bool {
			st := CordonStateOf(n)
			return did && st.Owner == owner && st.Run == run
		})
		return CordonState{}, fmt.Errorf("cordon %s: %w", node, err)
	}
	st := CordonStateOf(n)
	if did {
		rec.Record(ctx, NodeRef(n), false, "Cordoned", message)
	}
	return st, nil
}

// UncordonNode undoes owner's cordon. A node cordoned by anyone else (another
// runbook, a person, an autoscaler) is left cordoned and reported. cur is
// the node as the caller just read it.
func UncordonNode(ctx context.Context, cs kubernetes.Interface, rec Recorder, cur *corev1.Node, owner string) (CordonState, error) {
	node := cur.Name
	var did bool
	n, err := UpdateNodeFrom(ctx, cs, cur, func(n *corev1.Node) (NodeChange, error) {
		did = false
		st := CordonStateOf(n)
		if !st.Cordoned {
			// Our bookkeeping may outlive a cordon someone else lifted.
			if _, ok := n.Annotations[AnnCordonedBy]; ok && n.Annotations[AnnCordonedBy] == owner {
				return NodeChange{Annotations: clearCordonAnnotations()}, nil
			}
			return NodeChange{}, nil
		}
		if st.Owner != owner {
			return NodeChange{}, nil
		}
		did = true
		return NodeChange{Unschedulable: ptr.To(false), Annotations: clearCordonAnnotations()}, nil
	})
	message := fmt.Sprintf("uncordoned by rollbook %s, which had cordoned it", owner)
	if err != nil {
		err = RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "Uncordoned", message, func(n *corev1.Node) bool {
			return did && !n.Spec.Unschedulable
		})
		return CordonState{}, fmt.Errorf("uncordon %s: %w", node, err)
	}
	if did {
		rec.Record(ctx, NodeRef(n), false, "Uncordoned", message)
	}
	return CordonStateOf(n), nil
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
