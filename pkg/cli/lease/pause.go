package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// AnnPaused on a runbook's Lease pauses its rolls: a running roll finishes
// the node in flight and starts no other; a new run starts nothing. It lives
// on the Lease so that it outlives any one run and is seen by every run.
const AnnPaused = "rollbook.dev/paused"

// Pause says who paused the roll, when and why.
type Pause struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

func (p Pause) String() string {
	s := fmt.Sprintf("paused by %s at %s", p.By, p.At.UTC().Format(time.RFC3339))
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// SetPause pauses (p != nil) or resumes (p == nil) the roll whose Lease is
// ns/name, creating the Lease (held by no one) when no run has made it yet.
// A merge patch of one annotation: a live holder's renewals keep it.
func SetPause(ctx context.Context, cs kubernetes.Interface, ns, name string, p *Pause) error {
	var value *string
	if p != nil {
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		v := string(b)
		value = &v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{AnnPaused: value}}})
	if err != nil {
		return err
	}
	leases := cs.CoordinationV1().Leases(ns)
	_, err = leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) && p != nil {
		_, err = leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{AnnPaused: *value}}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
	}
	if apierrors.IsNotFound(err) {
		return nil // resuming a roll that was never paused
	}
	if err != nil {
		return fmt.Errorf("lease %s/%s: %w", ns, name, err)
	}
	return nil
}

// ReadPause returns the pause on the Lease ns/name, or nil.
func ReadPause(ctx context.Context, cs kubernetes.Interface, ns, name string) (*Pause, error) {
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lease %s/%s: %w", ns, name, err)
	}
	return PauseOf(l), nil
}

// PauseOf reads the pause recorded on a Lease the caller already has.
func PauseOf(l *coordv1.Lease) *Pause {
	v, ok := l.Annotations[AnnPaused]
	if !ok {
		return nil
	}
	var p Pause
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return &Pause{By: "unknown", Reason: "unreadable pause record: " + v}
	}
	return &p
}
