package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Deleter is a typed or dynamic client's Delete method, e.g.
// cs.CoreV1().Pods(ns).Delete.
type Deleter func(ctx context.Context, name string, opts metav1.DeleteOptions) error

// DeleteIfUnchanged deletes the object ref names only if it is still the one
// observed (same UID): a replacement created since under the same name is
// never touched. It reports whether it deleted; an object already gone or
// replaced is not an error. The Event is recorded only for a real deletion.
func DeleteIfUnchanged(ctx context.Context, rec Recorder, del Deleter, ref corev1.ObjectReference, uid types.UID,
	message string) (bool, error) {
	return deleteIfUnchanged(ctx, rec, del, ref, uid, "Deleted", message)
}

// DeleteHelperIfUnchanged is DeleteIfUnchanged for one of rollbook's own
// helper pods (recorded as ReasonHelperDeleted).
func DeleteHelperIfUnchanged(ctx context.Context, cs kubernetes.Interface, rec Recorder, p *corev1.Pod, message string) (bool, error) {
	return deleteIfUnchanged(ctx, rec, cs.CoreV1().Pods(p.Namespace).Delete, PodRef(p), p.UID, ReasonHelperDeleted, message)
}

func deleteIfUnchanged(ctx context.Context, rec Recorder, del Deleter, ref corev1.ObjectReference, uid types.UID,
	reason, message string) (bool, error) {
	err := del(ctx, ref.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && (ctx.Err() != nil || AnswerLost(err)) {
		// A dry-run delete tells without changing anything: gone means it
		// was deleted.
		return false, RecordIfApplied(ctx, err, rec, reason, message, func(ctx context.Context) (corev1.ObjectReference, bool) {
			derr := del(ctx, ref.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll},
				Preconditions: &metav1.Preconditions{UID: &uid}})
			return ref, apierrors.IsNotFound(derr)
		})
	}
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return false, err
	}
	rec.Record(ctx, ref, false, reason, message)
	return true, nil
}
