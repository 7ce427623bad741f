//go:build e2e

// Package rbac proves that deploy/rbac/ is enough: on a sim that authorizes
// with RBAC it applies the roles, then runs a full kmd upgrade and a full
// Agent Substrate roll as an impersonated user bound only to the operator
// roles, and status as one bound only to rollbook-viewer, who must be
// refused every mutation.
package rbac

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

const (
	operator = "alice@example.com"
	viewer   = "bob@example.com"
	stranger = "mallory@example.com"
)

// Each test starts its own sim: the two runbooks need different scenarios.
func start(t *testing.T, o simtest.Options) *simtest.Cluster {
	t.Helper()
	simtest.SkipShort(t)
	c, err := simtest.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	c.ExpectNoViolations(t)
	return c
}

// apply creates every object of deploy/rbac/FILE, and the namespaces its
// Roles live in when the scenario has none.
func apply(t *testing.T, ctx context.Context, c *simtest.Cluster, file string) {
	t.Helper()
	root, err := simtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "deploy", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch tm.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict(doc, &cr); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			_, err = c.Client.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{})
		case "Role":
			var role rbacv1.Role
			if err := yaml.UnmarshalStrict(doc, &role); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: role.Namespace}}
			if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			_, err = c.Client.RbacV1().Roles(role.Namespace).Create(ctx, &role, metav1.CreateOptions{})
		case "":
			continue
		default:
			t.Fatalf("%s: unexpected kind %q", file, tm.Kind)
		}
		if err != nil {
			t.Fatalf("apply %s %s: %v", file, tm.Kind, err)
		}
	}
}

// bind grants user every role of deploy/rbac/FILE: a ClusterRoleBinding to
// its ClusterRole and a RoleBinding to each of its Roles.
func bind(t *testing.T, ctx context.Context, c *simtest.Cluster, user, role string) {
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

// run executes a plugin command in-process as user (kubectl's --as).
func run(t *testing.T, ctx context.Context, c *simtest.Cluster, root func(genericiooptions.IOStreams) *cobra.Command,
	user string, args ...string) (string, int) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	code := cli.ExecuteContext(ctx, root(streams), append(args, "--kubeconfig", c.Kubeconfig, "--as", user), errOut)
	all := out.String() + errOut.String()
	t.Logf("%s as %s → exit %d\n%s", strings.Join(args, " "), user, code, all)
	return all, code
}

// forbidden: refused by the API server, or by the permission preflight
// that names what is missing before anything changes.
func forbidden(out string) bool {
	return strings.Contains(strings.ToLower(out), "forbidden") || strings.Contains(out, "you lack")
}

// applyRunner applies deploy/runner.yaml as shipped: the in-cluster runs'
// namespace, the tt-runner ServiceAccount bound to the tt-operator roles
// and the Role that lets a tt-operator submit and cancel.
func applyRunner(t *testing.T, ctx context.Context, c *simtest.Cluster) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := deploy.Apply(ctx, dyn, deploy.RunnerFile, nil); err != nil {
		t.Fatal(err)
	}
}

// proveInClusterSubmit: the viewer may not submit an in-cluster run; the
// operator submits one and cancels it (pkg/tt/ttcmd's in-cluster e2e runs
// a whole roll with tt-runner's own token).
func proveInClusterSubmit(t *testing.T, ctx context.Context, c *simtest.Cluster) {
	t.Helper()
	tcmd := ttcmd.NewRootCommand
	args := []string{"upgrade", "kmd", "--version", "2.8.0", "--nodes", "kwok-node-0", "--in-cluster"}
	if out, code := run(t, ctx, c, tcmd, viewer, args...); code == 0 || !forbidden(out) {
		t.Fatalf("the viewer submitted an in-cluster run: exit %d", code)
	}
	if out, code := run(t, ctx, c, tcmd, operator, args...); code != 0 || !strings.Contains(out, "created in "+deploy.RunnerNamespace) {
		t.Fatalf("operator --in-cluster: exit %d", code)
	}
	if out, code := run(t, ctx, c, tcmd, operator, "cancel"); code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("operator cancel: exit %d", code)
	}
	// --notify-url goes in the one Secret the operator may write there, and
	// with the Job.
	hook := "https://hooks.example/services/T0/B0/SECRETPATH"
	if out, code := run(t, ctx, c, tcmd, operator, append(args, "--notify-url", hook)...); code != 0 || strings.Contains(out, "SECRETPATH") {
		t.Fatalf("operator --in-cluster --notify-url: exit %d (or the URL printed)", code)
	}
	secrets := c.Client.CoreV1().Secrets(deploy.RunnerNamespace)
	if s, err := secrets.Get(ctx, deploy.RunnerNotifySecret, metav1.GetOptions{}); err != nil || string(s.Data[deploy.RunnerNotifyKey]) != hook {
		t.Fatalf("the operator's submit stored no webhook URL in %s: %v", deploy.RunnerNotifySecret, err)
	}
	if out, code := run(t, ctx, c, tcmd, operator, "cancel"); code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("operator cancel: exit %d", code)
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := secrets.Get(ctx, deploy.RunnerNotifySecret, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("Secret %s outlived its cancelled Job", deploy.RunnerNotifySecret)
	}
	sa := "system:serviceaccount:" + deploy.RunnerNamespace + ":" + deploy.RunnerServiceAccount
	if out, code := run(t, ctx, c, tcmd, sa, "status"); code != 0 || forbidden(out) {
		t.Fatalf("tt-runner status: exit %d", code)
	}
}

func TestTTOperatorUpgradesKMDAndViewerOnlyReads(t *testing.T) {
	c := start(t, simtest.Options{Nodes: 3, Scenario: "tt-fleet"})
	ctx := simtest.Context(t, 8*time.Minute)
	tcmd := ttcmd.NewRootCommand
	apply(t, ctx, c, "tt-operator.yaml")
	apply(t, ctx, c, "rollbook-viewer.yaml")
	applyAdmission(t, ctx, c)

	// Impersonation is real: with no binding even status is refused.
	if out, code := run(t, ctx, c, tcmd, stranger, "status"); code == 0 || !forbidden(out) {
		t.Fatalf("an unbound user read the fleet: exit %d", code)
	}
	applyRunner(t, ctx, c) // before bind: the operator's Role in the runner namespace is bound too
	bind(t, ctx, c, operator, "tt-operator")
	bind(t, ctx, c, viewer, "rollbook-viewer")
	proveInClusterSubmit(t, ctx, c)

	if _, code := run(t, ctx, c, tcmd, viewer, "status", "-o", "json"); code != 0 {
		t.Fatalf("viewer status: exit %d", code)
	}
	out, code := run(t, ctx, c, tcmd, viewer, "upgrade", "kmd", "--version", "2.8.0", "--nodes", "kwok-node-0")
	// The permission preflight names every missing permission at once, before any change.
	if code == 0 || !strings.Contains(out, "patch nodes cluster-wide") || !strings.Contains(out, "create pods/eviction") ||
		!strings.Contains(out, "tt-operator.yaml") {
		t.Fatalf("viewer upgrade must be refused naming the missing permissions: exit %d", code)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != "2.7.0" {
		t.Fatalf("the viewer's refused run changed kwok-node-0: unschedulable %v kmd %q", n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion])
	}

	if _, code := run(t, ctx, c, tcmd, operator, "upgrade", "kmd", "--version", "2.8.0"); code != 0 {
		t.Fatalf("operator kmd upgrade: exit %d", code)
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Labels[tt.LabelKMDVersion] != "2.8.0" || n.Spec.Unschedulable {
			t.Errorf("%s after the operator's upgrade: kmd %q, unschedulable %v", n.Name, n.Labels[tt.LabelKMDVersion], n.Spec.Unschedulable)
		}
	}
	if out, code := run(t, ctx, c, tcmd, viewer, "status"); code != 0 || !strings.Contains(out, "2.8.0") {
		t.Fatalf("viewer status after the upgrade: exit %d", code)
	}

	// Firmware, same operator, same policy, from a presigned URL: it reaches
	// the helpers in the Secret the operator may write and the policy
	// admits, and the Secret goes with the run.
	bundle := "file://" + filepath.Join(c.Dir, "bundles", "fw_pack-19.0.0.fwbundle") + "?X-Amz-Signature=0badc0de"
	if out, code := run(t, ctx, c, tcmd, operator, "upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle); code != 0 ||
		strings.Contains(out, "0badc0de") {
		t.Fatalf("operator firmware flash from a presigned URL: exit %d (or its signature printed)", code)
	}
	if _, err := c.Client.CoreV1().Secrets(helperNS).Get(ctx, tt.BundleSecretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the flash left Secret %s behind: %v", tt.BundleSecretName, err)
	}
	nodes, err = c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Labels[tt.LabelFirmware] != "19.0.0.0" || n.Spec.Unschedulable {
			t.Errorf("%s after the operator's flash: firmware %q, unschedulable %v", n.Name, n.Labels[tt.LabelFirmware], n.Spec.Unschedulable)
		}
	}
	proveHelperPolicy(t, ctx, c)

	// cleanup: the viewer may look but not remove; the operator removes.
	if out, code := run(t, ctx, c, tcmd, viewer, "cleanup", "--yes"); code == 0 || !strings.Contains(out, "you lack") ||
		!strings.Contains(out, "delete leases.coordination.k8s.io rollbook-tt") {
		t.Fatalf("viewer cleanup --yes must be refused naming the missing permissions: exit %d", code)
	}
	if _, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the viewer's refused cleanup removed the Lease: %v", err)
	}
	if out, code := run(t, ctx, c, tcmd, operator, "cleanup", "--yes", "--host-caches"); code != 0 ||
		!strings.Contains(out, "lease/kube-system/"+tt.LockName) || !strings.Contains(out, "removed /var/cache/tt-kmd") {
		t.Fatalf("operator cleanup --yes --host-caches (its helpers through the policy): exit %d", code)
	}
	if out, code := run(t, ctx, c, tcmd, operator, "cleanup"); code != 0 || !strings.Contains(out, "nothing to clean up") {
		t.Fatalf("operator cleanup after cleanup: exit %d", code)
	}
}

func TestATEOperatorRollsAndViewerOnlyReads(t *testing.T) {
	t.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	c := start(t, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
	ctx := simtest.Context(t, 8*time.Minute)
	acmd := atecmd.NewRootCommand
	const (
		newV = "v0.3.0"
		// One image per sandbox class: the ate-fleet serves gvisor and microvm pools.
		gvisor  = "gvisor=registry.example/ateom-gvisor:v0.3.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		microvm = "microvm=registry.example/ateom-microvm:v0.3.0@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	)
	apply(t, ctx, c, "ate-operator.yaml")
	apply(t, ctx, c, "rollbook-viewer.yaml")
	applyAdmission(t, ctx, c) // the operator's node writes and objects, limited
	if out, code := run(t, ctx, c, acmd, stranger, "status"); code == 0 || !forbidden(out) {
		t.Fatalf("an unbound user read the roll: exit %d", code)
	}
	// status reads the nodes' Ready column as a Table too, side by side
	// with its list: whichever is refused first is what the user reads, so
	// the Table's refusal must say who may not do what, as the list's does.
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: stranger}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.NodesNotReady(ctx, as, ""); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), stranger) {
		t.Fatalf("the nodes' Table, refused: %v; want forbidden, naming %s", err, stranger)
	}
	bind(t, ctx, c, operator, "ate-operator")
	bind(t, ctx, c, viewer, "rollbook-viewer")

	status := func(user string) campaign.Status {
		t.Helper()
		streams, _, out, errOut := genericiooptions.NewTestIOStreams()
		code := cli.ExecuteContext(ctx, atecmd.NewRootCommand(streams),
			[]string{"status", "-o", "json", "--kubeconfig", c.Kubeconfig, "--as", user}, errOut)
		var s campaign.Status
		if err := json.Unmarshal(out.Bytes(), &s); err != nil || code != 0 {
			t.Fatalf("status as %s: exit %d, %v\n%s%s", user, code, err, out, errOut)
		}
		return s
	}
	if s := status(operator); s.Phase != campaign.PhaseNotStarted || s.APIError != "" {
		t.Fatalf("operator status: phase %s, API error %q", s.Phase, s.APIError)
	}
	// The viewer reads the cluster, but cannot mint the ate-client token the
	// control API takes, so it reaches no RPC at all, mutating or not.
	if s := status(viewer); s.Phase != campaign.PhaseNotStarted || s.APIError == "" {
		t.Fatalf("viewer status: phase %s, API error %q (a viewer must not reach the API)", s.Phase, s.APIError)
	}
	if _, err := c.Client.CoreV1().ServiceAccounts("ate-system").Get(ctx, "ate-client", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ServiceAccount whose token the viewer is refused: %v", err)
	}
	// Preflight checks all the cluster says, and names the API check it cannot make.
	if out, code := run(t, ctx, c, acmd, viewer, "preflight"); code != cli.ExitBlocked || !forbidden(out) ||
		strings.Count(out, "✗") != 1 {
		t.Fatalf("viewer preflight: exit %d; want only the API check failed, as forbidden", code)
	}
	if _, code := run(t, ctx, c, acmd, operator, "preflight"); code != 0 {
		t.Fatalf("operator preflight: exit %d", code)
	}
	for _, call := range [][]string{{"api", "call", "ListWorkers"},
		{"api", "call", "ResumeActor", "-d", `{"actor":{"atespace":"x","name":"y"}}`, "--yes"}} {
		if out, code := run(t, ctx, c, acmd, viewer, call...); code == 0 || !forbidden(out) {
			t.Fatalf("viewer %s must be Forbidden: exit %d", strings.Join(call, " "), code)
		}
	}

	// Step 3, outside rollbook: the new atelet DaemonSet (cluster admin).
	sim, err := simtest.SimBinary()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sim, "ate-setup", "deploy-atelet", "--dir", c.Dir, "--version", newV).CombinedOutput(); err != nil {
		t.Fatalf("deploy atelet: %v\n%s", err, out)
	}
	out, code := run(t, ctx, c, acmd, viewer, "roll", "clone-pools", "--image", gvisor, "--image", microvm)
	if code == 0 || !forbidden(out) {
		t.Fatalf("viewer clone-pools must be Forbidden: exit %d", code)
	}
	if s := status(viewer); s.Phase != campaign.PhasePrepared {
		t.Fatalf("the viewer's refused clone-pools moved the roll to %s", s.Phase)
	}

	if _, code := run(t, ctx, c, acmd, operator, "roll", "clone-pools", "--image", gvisor, "--image", microvm); code != 0 {
		t.Fatalf("operator clone-pools: exit %d", code)
	}
	if _, code := run(t, ctx, c, acmd, operator, "roll", "next-node", "--all", "--wait"); code != 0 {
		t.Fatalf("operator roll --all: exit %d", code)
	}
	s := status(operator)
	if s.Counts[newV] != 3 || s.OldPoolPodsRunning != 0 || s.ActorsOnOldPools != 0 {
		t.Fatalf("after the operator's roll: %+v", s)
	}
	// Undo it all as the operator, then roll forward again.
	if out, code := run(t, ctx, c, acmd, viewer, "rollback", "--wait"); code == 0 || !forbidden(out) {
		t.Fatalf("viewer rollback must be Forbidden: exit %d", code)
	}
	if _, code := run(t, ctx, c, acmd, operator, "rollback", "--wait", "--control-plane-reverted"); code != 0 {
		t.Fatalf("operator rollback: exit %d", code)
	}
	if s := status(viewer); s.Phase != campaign.PhaseNotStarted || s.Counts[newV] != 0 {
		t.Fatalf("after the operator's rollback: phase %s counts %v", s.Phase, s.Counts)
	}
	if out, err := exec.Command(sim, "ate-setup", "deploy-atelet", "--dir", c.Dir, "--version", newV).CombinedOutput(); err != nil {
		t.Fatalf("deploy atelet again: %v\n%s", err, out)
	}
	if _, code := run(t, ctx, c, acmd, operator, "roll", "clone-pools", "--image", gvisor, "--image", microvm); code != 0 {
		t.Fatalf("operator clone-pools again: exit %d", code)
	}
	if _, code := run(t, ctx, c, acmd, operator, "roll", "next-node", "--all", "--wait"); code != 0 {
		t.Fatalf("operator roll --all again: exit %d", code)
	}
	if out, code := run(t, ctx, c, acmd, viewer, "retire", "--backup-dir", t.TempDir()); code == 0 || !forbidden(out) {
		t.Fatalf("viewer retire must be Forbidden: exit %d", code)
	}
	dir := t.TempDir()
	if _, code := run(t, ctx, c, acmd, operator, "retire", "--backup-dir", dir, "--backup-configmap"); code != 0 {
		t.Fatalf("operator retire: exit %d", code)
	}
	cms, err := c.Client.CoreV1().ConfigMaps("ate-workers").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := os.ReadDir(dir)
	if len(files) == 0 || len(cms.Items) == 0 {
		t.Fatalf("retire kept no backup: %d file(s), %d ConfigMap(s) in ate-workers", len(files), len(cms.Items))
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"python-small", "python-large"} {
		_, err := dyn.Resource(fleet.WorkerPoolGVR).Namespace("ate-workers").Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("old pool ate-workers/%s after the operator's retire: %v", name, err)
		}
	}

	// cleanup after the whole roll: the viewer is refused, the operator's
	// dry run lists the Lease and the history and changes nothing, --yes
	// removes them, and a second cleanup finds nothing.
	if out, code := run(t, ctx, c, acmd, viewer, "cleanup", "--yes"); code == 0 || !strings.Contains(out, "you lack") {
		t.Fatalf("viewer cleanup --yes must be refused naming the missing permissions: exit %d", code)
	}
	before := c.Snapshot(t)
	out, code = run(t, ctx, c, acmd, operator, "cleanup")
	if code != 0 || !strings.Contains(out, "would remove lease/ate-system/"+fleet.LockName) ||
		!strings.Contains(out, "would remove configmap/ate-system/rollbook-ate-history") {
		t.Fatalf("operator cleanup dry run: exit %d, want the Lease and the history listed", code)
	}
	if after := c.Snapshot(t); after != before {
		t.Fatalf("the dry run changed the cluster:\nbefore %s\nafter  %s", before, after)
	}
	if _, code := run(t, ctx, c, acmd, operator, "cleanup", "--yes"); code != 0 {
		t.Fatalf("operator cleanup --yes: exit %d", code)
	}
	if out, code := run(t, ctx, c, acmd, operator, "cleanup"); code != 0 || !strings.Contains(out, "nothing to clean up") {
		t.Fatalf("operator cleanup after cleanup: exit %d", code)
	}
	if s := status(viewer); s.Counts[newV] != 3 {
		t.Fatalf("cleanup changed the roll's outcome: %+v", s)
	}
}
