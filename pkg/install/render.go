package install

import (
	"bytes"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/tt"
)

// AdmissionObjects are the admission policies a cluster admin applies,
// with their parameters p, for helpers in namespace ns.
func AdmissionObjects(ns string, p tt.AdminParams) ([]runtime.Object, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	helpers, err := HelperPolicy(ns)
	if err != nil {
		return nil, err
	}
	nodes, err := NodeWritesPolicy()
	if err != nil {
		return nil, err
	}
	objects, err := OperatorObjectsPolicy(ns)
	if err != nil {
		return nil, err
	}
	pods, err := OperatorPodsPolicy(ns)
	if err != nil {
		return nil, err
	}
	return []runtime.Object{
		tt.AdminParamsConfigMap(ns, p),
		helpers, HelperPolicyBinding(ns),
		nodes, NodeWritesPolicyBinding(ns),
		objects, OperatorObjectsPolicyBinding(ns),
		pods, OperatorPodsPolicyBinding(ns),
	}, nil
}

// Unstructured is o as the API sends it, without the fields a typed
// object marshals empty (creationTimestamp, status).
func Unstructured(o runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// YAML writes objects as one multi-document file after header.
func YAML(header string, objects []runtime.Object) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	for i, o := range objects {
		u, err := Unstructured(o)
		if err != nil {
			return nil, err
		}
		raw, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", u.GetName(), err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(raw)
	}
	return b.Bytes(), nil
}

func partOf() map[string]string { return map[string]string{"app.kubernetes.io/part-of": "rollbook"} }
