package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// Cordon marks the node unschedulable on behalf of owner (a runbook name)
// and records that ownership on the node in the same patch. A node that is
// already cordoned by someone else keeps that foreign cordon and is not
// claimed, so a later Uncordon by owner leaves it cordoned — the prior state
// is restored. Returns the resulting state.
func Cordon(ctx context.Context, cs kubernetes.Interface, rec Recorder, node, owner, run string) (CordonState, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return CordonState{}, fmt.Errorf("cordon %s: %w", node, err)
	}
	return CordonNode(ctx, cs, rec, n, owner, run)
}

// CordonNode is Cordon starting from a node the caller just read.
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
			Unschedulable: boolPtr(true),
			Annotations: map[string]*string{
				AnnCordonedBy: Ptr(owner),
				AnnCordonedAt: Ptr(time.Now().UTC().Format(time.RFC3339)),
				AnnCordonRun:  Ptr(run),
			},
		}, nil
	})
	if err != nil {
		return CordonState{}, fmt.Errorf("cordon %s: %w", node, err)
	}
	st := CordonStateOf(n)
	if did {
		rec.Record(ctx, NodeRef(n), false, "Cordoned", fmt.Sprintf("cordoned by rollbook %s (run %s)", owner, run))
	}
	return st, nil
}

// Uncordon undoes owner's cordon. A node cordoned by anyone else (another
// runbook, a person, an autoscaler) is left cordoned and reported.
func Uncordon(ctx context.Context, cs kubernetes.Interface, rec Recorder, node, owner string) (CordonState, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return CordonState{}, fmt.Errorf("uncordon %s: %w", node, err)
	}
	return UncordonNode(ctx, cs, rec, n, owner)
}

// UncordonNode is Uncordon starting from a node the caller just read.
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
		return NodeChange{Unschedulable: boolPtr(false), Annotations: clearCordonAnnotations()}, nil
	})
	if err != nil {
		return CordonState{}, fmt.Errorf("uncordon %s: %w", node, err)
	}
	if did {
		rec.Record(ctx, NodeRef(n), false, "Uncordoned", fmt.Sprintf("uncordoned by rollbook %s, which had cordoned it", owner))
	}
	return CordonStateOf(n), nil
}

func clearCordonAnnotations() map[string]*string {
	return map[string]*string{AnnCordonedBy: nil, AnnCordonedAt: nil, AnnCordonRun: nil}
}

func boolPtr(b bool) *bool { return &b }
