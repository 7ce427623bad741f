//go:build e2e

// Package security tries rollbook's admission policies as an attacker
// holding only the shipped operator roles would, on the sim's real
// kube-apiserver: every helper shape the runbooks render is admitted, and
// a pod that differs from one in any single field — generated from the
// Pod type, not listed — is refused; the operator cannot write the node
// labels the helper guard reads, nor objects of other names.
package security

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/admissiontest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/tt"
)

const (
	operator = "mallory@example.com" // bound to the shipped operator roles, and nothing else
	helperNS = deploy.HelperNamespace
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "tt-fleet"}) }

// setup applies the shipped roles (bound to operator) and the admission
// policies rendered with params, and returns a client acting as operator.
func setup(t *testing.T, ctx context.Context, c *simtest.Cluster, params tt.AdminParams) kubernetes.Interface {
	t.Helper()
	for _, f := range []string{"tt-operator.yaml", "ate-operator.yaml"} {
		applyFile(t, ctx, c, filepath.Join("deploy", "rbac", f))
	}
	// In-cluster runs' namespace, whose Role lets the operator submit.
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := deploy.Apply(ctx, dyn, deploy.RunnerFile, nil); err != nil {
		t.Fatal(err)
	}
	bind(t, ctx, c, operator, "tt-operator")
	bind(t, ctx, c, operator, "ate-operator")
	applyAdmission(t, ctx, c, params)
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operator}
	cfg.QPS, cfg.Burst = -1, 0 // thousands of dry-run creates; the server is ours
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// testParams are the admin's choices for these tests: the sim's image.
func testParams() tt.AdminParams {
	p := tt.DefaultAdminParams()
	p.Images = []string{os.Getenv("ROLLBOOK_HELPER_IMAGE")}
	return p
}

// applyAdmission applies the admission objects rendered with params.
func applyAdmission(t *testing.T, ctx context.Context, c *simtest.Cluster, params tt.AdminParams) {
	t.Helper()
	admissiontest.Apply(t, ctx, c.RESTConfig, helperNS, params)
}

// applyFile applies a shipped manifest, creating the namespaces its Roles
// need when the scenario has none.
func applyFile(t *testing.T, ctx context.Context, c *simtest.Cluster, rel string) {
	t.Helper()
	root, err := simtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.TrimSpace(string(doc))) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(mustJSON(t, doc)); err != nil {
			t.Fatal(err)
		}
		if ns := u.GetNamespace(); ns != "" {
			nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
				"metadata": map[string]any{"name": ns}}}
			admissiontest.ApplyObject(t, ctx, dyn, nsObj)
		}
		admissiontest.ApplyObject(t, ctx, dyn, u)
	}
}

func mustJSON(t *testing.T, doc []byte) []byte {
	t.Helper()
	raw, err := utilyaml.ToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// bind binds user to the ClusterRole role and every Role of that name.
func bind(t *testing.T, ctx context.Context, c *simtest.Cluster, user, role string) {
	t.Helper()
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	name := role + ":" + strings.Split(user, "@")[0]
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	roles, err := c.Client.RbacV1().Roles(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + role})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.Items {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}}
		if _, err := c.Client.RbacV1().RoleBindings(r.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil &&
			!apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}
