package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LabelSecret marks a Secret rollbook made for its helpers; its value says
// what it holds (e.g. "bundle-url"). `cleanup` removes every such Secret.
const LabelSecret = AnnotationPrefix + "secret"

// PutSecret creates or updates the Secret ns/name holding data under its
// label, so a re-run with another value replaces it; owners (replacing
// any earlier) make the garbage collector delete it with them. Neither the
// value nor anything derived from it is recorded: the caller records the
// name only.
func PutSecret(ctx context.Context, cs kubernetes.Interface, ns, name, purpose string, data map[string][]byte,
	owners ...metav1.OwnerReference) error {
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelSecret: purpose},
			OwnerReferences: owners},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *corev1.Secret
		if cur, err = cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			cur.Labels, cur.Data, cur.StringData, cur.OwnerReferences = want.Labels, want.Data, nil, owners
			_, err = cs.CoreV1().Secrets(ns).Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("store secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// DeleteSecret deletes the Secret ns/name; one already gone is fine.
func DeleteSecret(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	err := cs.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete secret %s/%s: %w", ns, name, err)
	}
	return nil
}
