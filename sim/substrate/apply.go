package substrate

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// fieldManager owns what the simulated install applies (ate-setup's role).
const fieldManager = "rollbook-sim-ate-setup"

// applyItem is one object of an install, in apply order.
type applyItem struct {
	gvr schema.GroupVersionResource
	obj runtime.Object
}

// apply server-side-applies a typed object (TypeMeta set) so reruns converge
// instead of failing on AlreadyExists.
func apply(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, obj runtime.Object,
	manager string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	u := &unstructured.Unstructured{Object: m}
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns := u.GetNamespace(); ns != "" {
		ri = dyn.Resource(gvr).Namespace(ns)
	}
	out, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: manager, Force: true})
	if err != nil {
		return nil, fmt.Errorf("apply %s %s/%s: %w", gvr.Resource, u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

var (
	gvrNamespace          = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvrServiceAccount     = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	gvrService            = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	gvrDeployment         = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	gvrDaemonSet          = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	gvrClusterPortForward = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "clusterportforwards"}
	// GVRWorkerPool is the WorkerPool resource.
	GVRWorkerPool = schema.GroupVersionResource{Group: "ate.dev", Version: "v1alpha1", Resource: "workerpools"}
)
