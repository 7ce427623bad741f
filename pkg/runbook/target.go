package runbook

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// NodeTarget is a runbook target that is one node; step clocks live in the
// node's annotations.
type NodeTarget struct {
	Client kubernetes.Interface
	Node   string
}

// Name implements Target.
func (t NodeTarget) Name() string { return "node/" + t.Node }

// Ref implements Target.
func (t NodeTarget) Ref() corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: t.Node}
}

// Annotation implements Target.
func (t NodeTarget) Annotation(ctx context.Context, key string) (string, bool, error) {
	n, err := t.Client.CoreV1().Nodes().Get(ctx, t.Node, metav1.GetOptions{})
	if err != nil {
		return "", false, err
	}
	v, ok := n.Annotations[key]
	return v, ok, nil
}

// SetAnnotation implements Target. The key is rollbook's own, so a plain
// merge patch of just that key cannot overwrite anyone else's change.
func (t NodeTarget) SetAnnotation(ctx context.Context, key string, value *string) error {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
	if err != nil {
		return err
	}
	_, err = t.Client.CoreV1().Nodes().Patch(ctx, t.Node, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

// ScopeTarget is a target that is no single object, such as "the roll".
// Its steps cannot have a Timeout: there is no object to keep the clock on.
type ScopeTarget struct {
	Scope  string
	Object corev1.ObjectReference // where events about it go
}

// Name implements Target.
func (t ScopeTarget) Name() string { return t.Scope }

// Ref implements Target.
func (t ScopeTarget) Ref() corev1.ObjectReference { return t.Object }

// Annotation implements Target.
func (t ScopeTarget) Annotation(context.Context, string) (string, bool, error) { return "", false, nil }

// SetAnnotation implements Target; scope targets keep no clocks.
func (t ScopeTarget) SetAnnotation(context.Context, string, *string) error {
	return fmt.Errorf("%s keeps no step clock: its steps must not have a timeout", t.Scope)
}
