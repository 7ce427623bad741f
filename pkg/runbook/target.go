package runbook

import (
	"context"

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
