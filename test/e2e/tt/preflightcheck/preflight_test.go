//go:build e2e

// Package preflightcheck runs kubectl tt preflight against a fleet with a
// blocker of each kind, and the firmware operator's refusal, on the sim.
package preflightcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

// Five nodes of tt-fleet-awkward: 0 and 1 plain, 2 host-managed (DKMS),
// 3 skip-labelled, 4 with a host process holding the device.
func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 5, Scenario: "tt-fleet-awkward"}) }

var run = tttest.Run

// runJSON is kubectl tt with -o json: stdout alone, decoded.
func runJSON(t *testing.T, ctx context.Context, args ...string) (tt.PreflightReport, map[string]any, int) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	code := cli.ExecuteContext(ctx, ttcmd.NewRootCommand(streams),
		append(args, "-o", "json", "--kubeconfig", simtest.Get(t).Kubeconfig), errOut)
	t.Logf("kubectl tt %s -o json → exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
	var rep tt.PreflightReport
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	_ = json.Unmarshal(out.Bytes(), &doc)
	return rep, doc, code
}

// nodeState is what preflight must leave as it was on every node.
type nodeState struct {
	Labels, Annotations map[string]string
	Spec                corev1.NodeSpec
	HostOps             int
}

func states(t *testing.T, nodes []string) map[string]nodeState {
	out := map[string]nodeState{}
	for _, n := range nodes {
		node := tttest.Node(t, n)
		ops, _ := fakehost.Ops(tttest.HostRoot(t, n))
		out[n] = nodeState{Labels: node.Labels, Annotations: node.Annotations, Spec: node.Spec, HostOps: len(ops)}
	}
	return out
}

func fleet() []string {
	var out []string
	for i := 0; i < 5; i++ {
		out = append(out, fmt.Sprintf("kwok-node-%d", i))
	}
	return out
}

func has(rep tt.PreflightReport, node, check, text string) bool {
	for _, f := range rep.Findings {
		if f.Node == node && f.Check == check && strings.Contains(f.Message, text) {
			return true
		}
	}
	return false
}

// preflight kmd lists, per node, each blocker of the fleet with its fix —
// an ungated DaemonSet holder, a bare pod, a PDB that allows no
// disruption, a host-managed and a skipped node, a host process holding
// the device — exits 3, and changes nothing: no cordon, no label or
// annotation, nothing on the hosts, no helper pod left.
func TestPreflightListsEveryBlockerAndChangesNothing(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	ns := c.NewNamespace(t)
	// kwok-node-0: a DaemonSet holding the device with no deploy gate.
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ungated", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ungated"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "ungated"}},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": "kwok-node-0"},
					Volumes: []corev1.Volume{{Name: "dev", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/dev/tenstorrent"}}}},
					Containers: []corev1.Container{{Name: "c", Image: "example.com/ungated"}}}}}}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kwok-node-1: a bare pod, and a Deployment's pod under a PDB at 0.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "kwok-node-1", Containers: []corev1.Container{{Name: "c", Image: "example.com/bare"}}}}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbl := map[string]string{"app": "precious"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "precious", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"kubernetes.io/hostname": "kwok-node-1"},
				Containers:   []corev1.Container{{Name: "c", Image: "example.com/precious"}}}}}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "precious-pdb", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: lbl}}}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the DaemonSet's pod, the bare pod and the PDB", func() bool {
		d, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, "ungated", metav1.GetOptions{})
		p, perr := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "precious-pdb", metav1.GetOptions{})
		b, berr := c.Client.CoreV1().Pods(ns).Get(ctx, "bare", metav1.GetOptions{})
		return err == nil && d.Status.NumberReady == 1 && perr == nil && p.Status.ObservedGeneration == p.Generation &&
			p.Status.CurrentHealthy == 1 && berr == nil && kube.PodReady(b)
	})

	nodes := fleet()
	before := states(t, nodes)
	var untouched []func() bool
	for _, n := range nodes {
		untouched = append(untouched, c.NeverCordoned(t, ctx, n))
	}
	out, code := run(t, ctx, "preflight", "kmd", "--version", "2.8.0")
	if code != cli.ExitBlocked {
		t.Errorf("text: exit %d, want %d", code, cli.ExitBlocked)
	}
	for _, w := range []string{"kwok-node-0", "DaemonSet " + ns + "/ungated", "Give it a deploy gate", ns + "/bare has no controller",
		"--force", "PodDisruptionBudget precious-pdb", "driver.tenstorrent.com/skip=true", "host processes outside Kubernetes",
		"blocker(s);", "node(s) blocked"} {
		if !strings.Contains(out, w) {
			t.Errorf("the text output does not say %q", w)
		}
	}
	rep, doc, code := runJSON(t, ctx, "preflight", "kmd", "--version", "2.8.0")
	if code != cli.ExitBlocked {
		t.Errorf("json: exit %d, want %d", code, cli.ExitBlocked)
	}
	if doc["apiVersion"] != "rollbook.dev/v1alpha1" || doc["kind"] != "PreflightReport" || rep.Component != "kmd" ||
		!reflect.DeepEqual(rep.Nodes, nodes) {
		t.Errorf("document: apiVersion %v kind %v component %q nodes %v", doc["apiVersion"], doc["kind"], rep.Component, rep.Nodes)
	}
	for _, w := range []struct{ node, check, text string }{
		{"kwok-node-0", tt.CheckProbe, "DaemonSet " + ns + "/ungated"},
		{"kwok-node-1", tt.CheckBarePod, ns + "/bare"},
		{"kwok-node-1", tt.CheckPDB, "precious-pdb"},
		{"kwok-node-3", tt.CheckExcluded, "skip=true"},
		{"kwok-node-4", tt.CheckProbe, "host processes outside Kubernetes"},
	} {
		if !has(rep, w.node, w.check, w.text) {
			t.Errorf("no finding %s/%s saying %q", w.node, w.check, w.text)
		}
	}
	// The DKMS node: excluded by its label, or found host-managed by the probe.
	if !has(rep, "kwok-node-2", tt.CheckExcluded, "host-managed") && !has(rep, "kwok-node-2", tt.CheckProbe, "host-managed") {
		t.Error("kwok-node-2 (DKMS) is not reported host-managed")
	}
	for i, n := range nodes {
		if !untouched[i]() {
			t.Errorf("%s was cordoned", n)
		}
	}
	if after := states(t, nodes); !reflect.DeepEqual(after, before) {
		for _, n := range nodes {
			if !reflect.DeepEqual(after[n], before[n]) {
				t.Errorf("%s changed:\nbefore %+v\nafter  %+v", n, before[n], after[n])
			}
		}
	}
	if l, err := c.Client.CoreV1().Pods(deploy.HelperNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) > 0 {
		t.Errorf("helper pods left: %v %v", l, err)
	}
	// smi needs no cordon: only the excluded nodes block it.
	rep, _, _ = runJSON(t, ctx, "preflight", "smi", "--version", "5.2.0", "--nodes", "kwok-node-0,kwok-node-3")
	if len(rep.Findings) != 1 || !has(rep, "kwok-node-3", tt.CheckExcluded, "skip=true") {
		t.Errorf("smi findings %+v, want kwok-node-3 excluded only", rep.Findings)
	}
	for _, del := range []func() error{
		func() error { return c.Client.AppsV1().DaemonSets(ns).Delete(ctx, "ungated", metav1.DeleteOptions{}) },
		func() error { return c.Client.CoreV1().Pods(ns).Delete(ctx, "bare", metav1.DeleteOptions{}) },
		func() error { return c.Client.AppsV1().Deployments(ns).Delete(ctx, "precious", metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the test's pods gone from kwok-node-0 and -1", func() bool {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	})
	rep, _, code = runJSON(t, ctx, "preflight", "kmd", "--version", "2.8.0", "--nodes", "kwok-node-0,kwok-node-1")
	if code != 0 || len(rep.Findings) != 0 {
		t.Errorf("with the blockers gone: exit %d, findings %+v", code, rep.Findings)
	}
}

// A TenstorrentFirmwarePolicy selecting a node, or the firmware operator's
// unfinished flash Job on it, stops upgrade firmware before the cordon
// (exit 3, the policy or Job and the fix), and preflight lists it.
func TestFirmwareOperatorRefusesBeforeCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	installFirmwarePolicyCRD(t, ctx)
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "firmware.tenstorrent.com/v1alpha1", "kind": "TenstorrentFirmwarePolicy",
		"metadata": map[string]any{"name": "fleet-fw"},
		"spec": map[string]any{"version": "19.0.0",
			"nodeAffinity": map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": "kwok-node-0"}}},
	}}
	if _, err := dyn.Resource(tt.FirmwarePolicyResource).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(tt.FirmwarePolicyResource).Delete(context.Background(), "fleet-fw", metav1.DeleteOptions{})
	})
	ns := c.NewNamespace(t)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "fw-flash-kwok-node-1", Namespace: ns,
		Labels: map[string]string{tt.FirmwareJobNodeLabel: "kwok-node-1", tt.FirmwareJobCRLabel: "other-fw"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, NodeName: "kwok-node-1",
			Containers: []corev1.Container{{Name: "flash", Image: "example.com/flasher"}}}}}}
	if _, err := c.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bundle := "file://" + c.Dir + "/bundles/fw_pack-19.9.0.fwbundle"
	for node, want := range map[string][]string{
		"kwok-node-0": {"TenstorrentFirmwarePolicy fleet-fw", "kubectl edit ttfwp fleet-fw"},
		"kwok-node-1": {"flash Job " + ns + "/fw-flash-kwok-node-1", "policy other-fw"},
	} {
		untouched := c.NeverCordoned(t, ctx, node)
		ops, _ := fakehost.Ops(tttest.HostRoot(t, node))
		out, code := run(t, ctx, "upgrade", "firmware", "--version", "19.9.0", "--bundle-url", bundle, "--nodes", node)
		if code != cli.ExitBlocked {
			t.Errorf("%s: exit %d, want %d", node, code, cli.ExitBlocked)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the output does not say %q", node, w)
			}
		}
		if !untouched() {
			t.Errorf("%s was cordoned", node)
		}
		if after, _ := fakehost.Ops(tttest.HostRoot(t, node)); len(after) != len(ops) {
			t.Errorf("%s: the host changed: %v", node, after[len(ops):])
		}
	}
	rep, _, code := runJSON(t, ctx, "preflight", "firmware", "--version", "19.9.0", "--bundle-url", bundle,
		"--nodes", "kwok-node-0,kwok-node-1")
	if code != cli.ExitBlocked || !has(rep, "kwok-node-0", tt.CheckFirmwareOperator, "fleet-fw") ||
		!has(rep, "kwok-node-1", tt.CheckFirmwareOperator, "fw-flash-kwok-node-1") {
		t.Errorf("preflight firmware: exit %d findings %+v", code, rep.Findings)
	}
	// A finished Job claims nothing.
	if err := c.Client.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the Job gone", func() bool {
		l, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	})
	rep, _, _ = runJSON(t, ctx, "preflight", "firmware", "--version", "19.9.0", "--bundle-url", bundle, "--nodes", "kwok-node-1")
	if has(rep, "kwok-node-1", tt.CheckFirmwareOperator, "") {
		t.Errorf("with the Job gone the node is still claimed: %+v", rep.Findings)
	}
}

// installFirmwarePolicyCRD installs the firmware operator's CRD (the
// schema kept open: rollbook reads only spec.nodeAffinity/nodeSelector
// and spec.paused), removed when the test ends.
func installFirmwarePolicyCRD(t *testing.T, ctx context.Context) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(simtest.Get(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	crdRes := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	const name = "tenstorrentfirmwarepolicies.firmware.tenstorrent.com"
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"group": "firmware.tenstorrent.com", "scope": "Cluster",
			"names": map[string]any{"plural": "tenstorrentfirmwarepolicies", "singular": "tenstorrentfirmwarepolicy",
				"kind": "TenstorrentFirmwarePolicy", "shortNames": []any{"ttfwp"}},
			"versions": []any{map[string]any{"name": "v1alpha1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object",
					"x-kubernetes-preserve-unknown-fields": true}}}}}}}
	if _, err := dyn.Resource(crdRes).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyn.Resource(crdRes).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	waitFor(t, ctx, "the CRD served", func() bool {
		_, err := dyn.Resource(tt.FirmwarePolicyResource).List(ctx, metav1.ListOptions{})
		return err == nil
	})
}

// waitFor polls cond (against the API server) until it holds.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// kubectl-tt's proxy environment reaches the probe helper the API server
// admitted (the helper namespace's admission policy is the sim's own).
func TestProxyEnvironmentReachesTheProbeHelper(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	t.Setenv("HTTPS_PROXY", "http://proxy.example:3128")
	t.Setenv("no_proxy", ".svc,10.0.0.0/8")
	w, err := c.Client.CoreV1().Pods(deploy.HelperNamespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan map[string]string, 1)
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Labels[kube.LabelHelper] == "probe" {
				env := map[string]string{}
				for _, e := range p.Spec.Containers[0].Env {
					env[e.Name] = e.Value
				}
				select {
				case seen <- env:
				default:
				}
			}
		}
	}()
	if _, code := run(t, ctx, "preflight", "kmd", "--version", "2.8.0", "--nodes", "kwok-node-0"); code != 0 && code != cli.ExitBlocked {
		t.Fatalf("exit %d", code)
	}
	w.Stop()
	select {
	case env := <-seen:
		if env["HTTPS_PROXY"] != "http://proxy.example:3128" || env["no_proxy"] != ".svc,10.0.0.0/8" {
			t.Errorf("the probe helper's env %v lacks kubectl-tt's proxy", env)
		}
	default:
		t.Error("no probe helper was seen")
	}
}
