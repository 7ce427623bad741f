// Package deploy holds the manifests a cluster admin applies before rollbook
// runs (the helper namespace, its PriorityClass and admission policy, the
// RBAC roles), embedded so the tests and the simulator apply exactly the
// files that ship.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// Manifest files, relative to deploy/.
const (
	NamespaceFile     = "namespace.yaml"
	PriorityClassFile = "priorityclass.yaml"
	HelperPolicyFile  = "admission/helper-policy.yaml"
	// RunnerFile is in-cluster runs' namespace, ServiceAccount and bindings.
	RunnerFile = "runner.yaml"
)

// RunnerNamespace and RunnerServiceAccount are what RunnerFile creates.
const (
	RunnerNamespace      = "rollbook-runs"
	RunnerServiceAccount = "tt-runner"
)

// The Secret an in-cluster run's --notify-url travels in: a webhook URL
// keeps its secret in the path, and a Job's spec is readable by more
// people than a Secret. The submit writes it in RunnerNamespace, owned by
// the Job (deleted with it); the Job's pod reads it as RunnerNotifyEnv.
const (
	RunnerNotifySecret = "rollbook-tt-notify-url"
	RunnerNotifyKey    = "url"
	RunnerNotifyEnv    = "ROLLBOOK_NOTIFY_URL"
)

// HelperNamespace and HelperPriorityClass are what NamespaceFile and
// PriorityClassFile create: the defaults of kubectl tt's helper flags.
const (
	HelperNamespace     = "rollbook-system"
	HelperPriorityClass = "rollbook-helper"
)

//go:embed *.yaml admission/*.yaml rbac/*.yaml
var files embed.FS

// Objects parses every object of a manifest file.
func Objects(file string) ([]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile(file)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// resources maps the kinds deploy/ ships to their API resource and whether
// it is namespaced (no discovery needed).
var resources = map[schema.GroupKind]struct {
	resource   string
	namespaced bool
}{
	{Kind: "Namespace"}:      {"namespaces", false},
	{Kind: "ConfigMap"}:      {"configmaps", true},
	{Kind: "ServiceAccount"}: {"serviceaccounts", true},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  {"clusterrolebindings", false},
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:                         {"rolebindings", true},
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               {"priorityclasses", false},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         {"clusterroles", false},
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:                                {"roles", true},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        {"validatingadmissionpolicies", false},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: {"validatingadmissionpolicybindings", false},
}

// Apply creates every object of file, leaving objects that already exist
// as they are. edit, when set, may change each object before it is sent.
func Apply(ctx context.Context, dyn dynamic.Interface, file string, edit func(*unstructured.Unstructured)) error {
	objs, err := Objects(file)
	if err != nil {
		return err
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		r, ok := resources[gvk.GroupKind()]
		if !ok {
			return fmt.Errorf("%s: kind %s is not one deploy.Apply knows", file, gvk.Kind)
		}
		if edit != nil {
			edit(o)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvk.GroupVersion().WithResource(r.resource))
		if r.namespaced {
			ri = dyn.Resource(gvk.GroupVersion().WithResource(r.resource)).Namespace(o.GetNamespace())
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("apply %s %s %s: %w", file, gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}
