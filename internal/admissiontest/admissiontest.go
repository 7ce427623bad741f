// Package admissiontest applies rollbook's admission objects to a sim as a
// cluster admin would, and waits until the API server enforces them.
package admissiontest

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Apply server-side applies the admission objects rendered with params for
// helpers in ns, checks the API server type-checked every policy without a
// warning, and waits until the helper policy refuses a pod it must refuse.
func Apply(t *testing.T, ctx context.Context, cfg *rest.Config, ns string, params tt.AdminParams) {
	t.Helper()
	objs, err := install.AdmissionObjects(ns, params)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The helper namespace first, as deploy/ has it (an ate-only sim lacks it).
	if err := deploy.Apply(ctx, dyn, deploy.NamespaceFile, nil); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		u, err := install.Unstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		ApplyObject(t, ctx, dyn, u)
	}
	for _, name := range []string{install.HelperPolicyName, install.NodeWritesPolicyName, install.OperatorObjectsPolicyName} {
		var vap *admissionv1.ValidatingAdmissionPolicy
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			vap, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			return err == nil && vap.Status.ObservedGeneration == vap.Generation, nil
		})
		if err != nil {
			t.Fatalf("policy %s was never type-checked: %v", name, err)
		}
		if tc := vap.Status.TypeChecking; tc != nil && len(tc.ExpressionWarnings) > 0 {
			for _, w := range tc.ExpressionWarnings {
				t.Errorf("policy %s: %s: %s", name, w.FieldRef, w.Warning)
			}
			t.FailNow()
		}
	}
	// Enforced once the plugin has loaded it: a bare pod is refused.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "admission-probe", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, bare, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), install.HelperPolicyName), nil
	})
	if err != nil {
		t.Fatalf("the helper policy is not enforced: %v", err)
	}
}

var resources = map[string]string{
	"ConfigMap": "configmaps", "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
	"ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings", "ClusterRole": "clusterroles", "Role": "roles",
	"Namespace": "namespaces",
}

// ApplyObject server-side applies u as a cluster admin would.
func ApplyObject(t *testing.T, ctx context.Context, dyn dynamic.Interface, u *unstructured.Unstructured) {
	t.Helper()
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil {
		t.Fatal(err)
	}
	res, ok := resources[u.GetKind()]
	if !ok {
		t.Fatalf("admissiontest: no resource for kind %s", u.GetKind())
	}
	var ri dynamic.ResourceInterface = dyn.Resource(gv.WithResource(res))
	if u.GetNamespace() != "" {
		ri = dyn.Resource(gv.WithResource(res)).Namespace(u.GetNamespace())
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	force := true
	if _, err := ri.Patch(ctx, u.GetName(), "application/apply-patch+yaml", raw,
		metav1.PatchOptions{FieldManager: "rollbook-admin", Force: &force}); err != nil {
		t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}
