package install

import (
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Labels on every object an install applies.
const (
	LabelPartOf    = "app.kubernetes.io/part-of"
	LabelVersion   = "app.kubernetes.io/version"
	LabelComponent = "rollbook.dev/component"
	// ComponentShared marks what both plugins install (the helper
	// namespace, the admin's parameters, the policies on the operators'
	// node and object writes, the viewer's ClusterRole).
	ComponentShared = "shared"
)

// Options are what an install renders for.
type Options struct {
	Plugin  string // "tt" or "ate"
	Version string // this binary's, stamped on every object
	Params  tt.AdminParams
	// WorkerNamespaces are the namespaces that hold WorkerPools (ate): the
	// ate-operator Role is made for each.
	WorkerNamespaces []string
}

// namespacesOf are the namespaces whose Roles each plugin's files hold;
// workerRoleTemplate is the namespace of ate-operator.yaml's Role that is
// made once per WorkerPool namespace.
var namespacesOf = map[string][]string{
	"tt":  {deploy.HelperNamespace, "kube-system", deploy.RunnerNamespace},
	"ate": {"ate-system"},
}

const workerRoleTemplate = "ate-workers"

// filesOf are each plugin's manifests of deploy/.
var filesOf = map[string][]string{
	"tt": {deploy.NamespaceFile, deploy.PriorityClassFile, "rbac/tt-operator.yaml", "rbac/rollbook-viewer.yaml",
		deploy.RunnerFile},
	"ate": {deploy.NamespaceFile, "rbac/ate-operator.yaml", "rbac/rollbook-viewer.yaml"},
}

// Objects are what a cluster admin applies for o.Plugin, labelled with the
// version and the component, for the cluster at hand: tt's hold no Agent
// Substrate object, ate's one operator Role per WorkerPool namespace.
func Objects(o Options) ([]*unstructured.Unstructured, error) {
	files, ok := filesOf[o.Plugin]
	if !ok {
		return nil, fmt.Errorf("install: no plugin %q", o.Plugin)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		objs, err := deploy.Objects(f)
		if err != nil {
			return nil, err
		}
		for _, u := range objs {
			out = append(out, forCluster(o, u)...)
		}
	}
	admission, err := admissionFor(o)
	if err != nil {
		return nil, err
	}
	for _, a := range admission {
		u, err := Unstructured(a)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	for _, u := range out {
		stamp(o, u)
	}
	return out, nil
}

// forCluster keeps u when it belongs to the plugin, and makes the
// per-WorkerPool-namespace Role once per namespace.
func forCluster(o Options, u *unstructured.Unstructured) []*unstructured.Unstructured {
	ns := u.GetNamespace()
	switch {
	case ns == "":
		return []*unstructured.Unstructured{u}
	case o.Plugin == "ate" && ns == workerRoleTemplate:
		var out []*unstructured.Unstructured
		names := slices.Clone(o.WorkerNamespaces)
		sort.Strings(names)
		for _, w := range names {
			c := u.DeepCopy()
			c.SetNamespace(w)
			out = append(out, c)
		}
		return out
	case slices.Contains(namespacesOf[o.Plugin], ns):
		return []*unstructured.Unstructured{u}
	}
	return nil
}

// admissionFor: the shared policies and the admin's parameters for both
// plugins (the parameters live in the helper namespace), the helper policy
// for tt.
func admissionFor(o Options) ([]runtime.Object, error) {
	all, err := AdmissionObjects(deploy.HelperNamespace, o.Params)
	if err != nil {
		return nil, err
	}
	if o.Plugin == "tt" {
		return all, nil
	}
	var out []runtime.Object
	for _, a := range all {
		if u, err := Unstructured(a); err == nil && u.GetName() != HelperPolicyName {
			out = append(out, a)
		}
	}
	return out, nil
}

// sharedKinds are the objects both plugins render alike.
func shared(u *unstructured.Unstructured) bool {
	switch {
	case u.GetKind() == "Namespace" && u.GetName() == deploy.HelperNamespace,
		u.GetKind() == "ConfigMap" && u.GetName() == tt.AdminParamsName,
		u.GetName() == NodeWritesPolicyName, u.GetName() == OperatorObjectsPolicyName, u.GetName() == OperatorPodsPolicyName,
		u.GetKind() == "ClusterRole" && u.GetName() == "rollbook-viewer":
		return true
	}
	return false
}

func stamp(o Options, u *unstructured.Unstructured) {
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[LabelPartOf] = "rollbook"
	l[LabelVersion] = labelValue(o.Version)
	l[LabelComponent] = o.Plugin
	if shared(u) {
		l[LabelComponent] = ComponentShared
	}
	u.SetLabels(l)
}

// labelValue is v as a label value may hold it (a pseudo-version's "+").
func labelValue(v string) string {
	out := []rune{}
	for _, r := range v {
		if r == '+' || r == '/' {
			r = '_'
		}
		out = append(out, r)
	}
	if len(out) > 63 {
		out = out[:63]
	}
	return string(out)
}
