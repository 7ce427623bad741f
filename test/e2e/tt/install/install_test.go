//go:build e2e

// Package install proves `kubectl tt install` and `kubectl ate install`:
// what they print is for the cluster at hand, what they apply lets a user
// bound only to the roles roll, and uninstall waits for the lock.
package install

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "tt-fleet"}) }

const operator = "erin@example.com"

func run(t *testing.T, ctx context.Context, c *simtest.Cluster, root func(genericiooptions.IOStreams) *cobra.Command,
	as string, args ...string) (string, int) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	if as != "" {
		args = append(args, "--as", as)
	}
	code := cli.ExecuteContext(ctx, root(streams), append(args, "--kubeconfig", c.Kubeconfig), errOut)
	t.Logf("%s (as %q) → exit %d\n%s%s", strings.Join(args, " "), as, code, tail(out.String()), errOut.String())
	return out.String() + errOut.String(), code
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// The admin's first run: install applies what the roles and policies need,
// an operator bound only to them rolls, uninstall waits for the lock and
// then removes exactly what install applied.
func TestTTInstallThenRollAsOperator(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	_, image, err := simtest.HelperImage()
	if err != nil || image == "" {
		t.Fatalf("the sim's node-agent image: %q %v", image, err)
	}
	bundles := "file://" + filepath.Join(c.Dir, "bundles") + "/"

	// Before install, preflight says what is missing; it blocks nothing.
	if out, _ := run(t, ctx, c, ttcmd.NewRootCommand, "", "preflight", "kmd", "--version", "2.8.0", "--helper-image", image); !strings.Contains(out,
		"[install]") || !strings.Contains(out, "not installed: ") || !strings.Contains(out, "validatingadmissionpolicy/"+install.HelperPolicyName) {
		t.Errorf("preflight before install must name what is not installed")
	}
	out, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "install", "--image", image)
	if code != 0 || strings.Contains(out, "ate-system") || strings.Contains(out, "ate-operator") ||
		!strings.Contains(out, "name: "+install.HelperPolicyName) {
		t.Fatalf("tt install must print its objects and none of Agent Substrate's: exit %d", code)
	}
	if _, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "install", "--image", "registry.example/node-agent:1"); code != cli.ExitUsage {
		t.Errorf("an image by tag: exit %d, want %d", code, cli.ExitUsage)
	}
	for i := range 2 { // twice: an install applied again changes nothing
		if _, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "install", "--apply", "--image", image, "--bundle-url-prefix",
			bundles); code != 0 {
			t.Fatalf("install --apply (%d): exit %d", i+1, code)
		}
	}
	vap, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, install.HelperPolicyName, metav1.GetOptions{})
	if err != nil || vap.Labels[install.LabelComponent] != "tt" || vap.Labels[install.LabelVersion] == "" {
		t.Fatalf("the helper policy as installed: %v %v", err, vap.GetLabels())
	}
	if out, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "preflight", "kmd", "--version", "2.8.0"); code != 0 ||
		strings.Contains(out, "[install]") {
		t.Errorf("preflight after install: exit %d, and it must find the install current", code)
	}
	// A policy another version installed is reported, named with its version.
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Patch(ctx, install.HelperPolicyName,
		types.MergePatchType, []byte(`{"metadata":{"labels":{"`+install.LabelVersion+`":"v0.0.1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "preflight", "kmd", "--version", "2.8.0"); code != 0 ||
		!strings.Contains(out, "from another version: validatingadmissionpolicy/"+install.HelperPolicyName+" (v0.0.1)") ||
		!strings.Contains(out, "kubectl tt install --apply") {
		t.Errorf("preflight with a policy of v0.0.1: exit %d, and it must name the policy, its version and the fix", code)
	}
	if _, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "install", "--apply", "--image", image, "--bundle-url-prefix",
		bundles); code != 0 {
		t.Fatalf("install --apply again: exit %d", code)
	}
	bindAll(t, ctx, c, operator, "tt-operator")
	if _, code := run(t, ctx, c, ttcmd.NewRootCommand, operator, "upgrade", "kmd", "--version", "2.8.0"); code != 0 {
		t.Fatalf("the operator's kmd upgrade after install: exit %d", code)
	}
	// Pinned, as the admin's policy requires by default (the commit the
	// kmd run pins itself).
	raw, err := os.ReadFile(filepath.Join(c.Dir, "bundles", "fw_pack-19.0.0.fwbundle"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if _, code := run(t, ctx, c, ttcmd.NewRootCommand, operator, "upgrade", "firmware", "--version", "19.0.0", "--bundle-url",
		bundles+"fw_pack-19.0.0.fwbundle", "--bundle-sha256", hex.EncodeToString(sum[:])); code != 0 {
		t.Fatalf("the operator's firmware flash after install: exit %d", code)
	}

	// A run holds the lock: uninstall is refused and removes nothing.
	l, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l, err = c.Client.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: tt.LockName, Namespace: "kube-system"}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("someone@host/1/run"), ptr.To[int32](3600)
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := c.Client.CoordinationV1().Leases("kube-system").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "uninstall", "--yes"); code != cli.ExitLocked {
		t.Errorf("uninstall under a held lock: exit %d, want %d", code, cli.ExitLocked)
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, install.HelperPolicyName,
		metav1.GetOptions{}); err != nil {
		t.Fatalf("the refused uninstall removed the policy: %v", err)
	}
	if err := c.Client.CoordinationV1().Leases("kube-system").Delete(ctx, tt.LockName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "uninstall"); code != 0 || !strings.Contains(out, "would remove") {
		t.Errorf("uninstall without --yes must only list: exit %d", code)
	}
	if _, code := run(t, ctx, c, ttcmd.NewRootCommand, "", "uninstall", "--yes"); code != 0 {
		t.Fatalf("uninstall --yes: exit %d", code)
	}
	for _, name := range []string{install.HelperPolicyName, install.NodeWritesPolicyName} {
		if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("policy %s after uninstall: %v", name, err)
		}
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Get(ctx, "tt-operator", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole tt-operator after uninstall: %v", err)
	}
}

// bindAll binds user to the ClusterRole role and every Role of that name.
func bindAll(t *testing.T, ctx context.Context, c *simtest.Cluster, user, role string) {
	t.Helper()
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	name := role + ":" + strings.Split(user, "@")[0]
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	roles, err := c.Client.RbacV1().Roles(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + role})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.Items {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}}
		if _, err := c.Client.RbacV1().RoleBindings(r.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
