package runbook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
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

// SetAnnotation implements Target.
func (t NodeTarget) SetAnnotation(ctx context.Context, key string, value *string) error {
	_, err := kube.UpdateNode(ctx, t.Client, t.Node, func(*corev1.Node) (kube.NodeChange, error) {
		return kube.NodeChange{Annotations: map[string]*string{key: value}}, nil
	})
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
