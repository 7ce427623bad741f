//go:build e2e

package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/apicount"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

// The tt-fleet-awkward scenario with 6 nodes: kwok-node-0..2 plain (2 is a
// Galaxy), 3 host-managed (DKMS), 4 labelled skip, 5 with a stubborn host
// process holding /dev/tenstorrent. Every node starts at tt-kmd 2.7.0.
func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 6, Scenario: "tt-fleet-awkward"})
}

const (
	dkmsNode     = "kwok-node-3"
	skipNode     = "kwok-node-4"
	stubbornNode = "kwok-node-5"
)

// run executes `kubectl tt ARGS` in-process against the sim.
func run(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	c := simtest.Get(t)
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	root := ttcmd.NewRootCommand(streams)
	code := cli.ExecuteContext(ctx, root, append(args, "--kubeconfig", c.Kubeconfig), errOut)
	all := out.String() + errOut.String()
	t.Logf("kubectl tt %s → exit %d\n%s", strings.Join(args, " "), code, all)
	return all, code
}

func node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := simtest.Get(t).Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func bundle(t *testing.T, version string) string {
	return "file://" + filepath.Join(simtest.Get(t).Dir, "bundles", "fw_pack-"+version+".fwbundle")
}

// clusterSnapshot is what bad input must never change (simtest.Snapshot).
func clusterSnapshot(t *testing.T) string {
	t.Helper()
	return simtest.Get(t).Snapshot(t)
}

// Bad input: exit 2, a message that names the input and the fix, and no
// change to the cluster at all (not even the lock or the history).
func TestInvalidInputChangesNothing(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	kmd := func(extra ...string) []string {
		return append([]string{"upgrade", "kmd", "--version", "2.8.0"}, extra...)
	}
	fw := func(extra ...string) []string {
		return append([]string{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0")}, extra...)
	}
	rows := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"upgrade", "kmd", "--version", "2"}, cli.ExitUsage, "must look like"},
		{[]string{"upgrade", "kmd", "--version", "2.8.0;reboot"}, cli.ExitUsage, "2.8.0;reboot"},
		{[]string{"upgrade", "kmd", "--version", "$(reboot)"}, cli.ExitUsage, "$(reboot)"},
		{[]string{"upgrade", "kmd", "--version", "2.8.0 && rm -rf /"}, cli.ExitUsage, "rm -rf"},
		{[]string{"upgrade", "kmd", "--version", "../../etc/passwd"}, cli.ExitUsage, "../../etc/passwd"},
		{[]string{"upgrade", "kmd", "--version", "2.8.0\nrmmod"}, cli.ExitUsage, "--version"},
		{[]string{"upgrade", "kmd"}, cli.ExitUsage, `"version" not set`},
		{kmd("--nodes", "no-such-node"), cli.ExitUsage, `node "no-such-node" does not exist`},
		{kmd("--nodes", "kwok-node-0,kwok-nod-1"), cli.ExitUsage, `"kwok-nod-1" does not exist`},
		{kmd("-l", "a=(b"), cli.ExitUsage, "--selector"},
		{kmd("-l", "rollbook-test/nothing=matches"), cli.ExitUsage, "no node matches"},
		{kmd("--helper-image", ""), cli.ExitUsage, "carries no node-agent image"},
		{kmd("--helper-image", "bad image"), cli.ExitUsage, "bad image"},
		{kmd("--helper-namespace", ""), cli.ExitUsage, "--helper-namespace"},
		{kmd("--deploy-gate", "not a label!"), cli.ExitUsage, "not a label!"},
		{kmd("--dry-run=server"), cli.ExitUsage, "--dry-run=server"},
		{kmd("--canary", "1"), cli.ExitUsage, "--soak"},
		{kmd("--soak", "-1s"), cli.ExitUsage, "--soak"},
		{kmd("--canary", "-1", "--soak", "1m"), cli.ExitUsage, "--canary"},
		{kmd("-o", "xml"), cli.ExitUsage, "xml"},
		{kmd("--frobnicate"), cli.ExitUsage, "frobnicate"},
		{kmd("--kmd-commit", "abc123"), cli.ExitUsage, "--kmd-commit"},
		{kmd("--git-url", "http://insecure/tt-kmd.git"), cli.ExitUsage, "--git-url"},
		{kmd("--git-url", "git://host/tt-kmd.git"), cli.ExitUsage, "--git-url"},
		{kmd("--git-url", "https://user:secret@host/tt-kmd.git"), cli.ExitUsage, "--git-url"},
		{kmd("--git-url", "https://host/tt-kmd.git?token=secret"), cli.ExitUsage, "?REDACTED"},
		{kmd("--git-url", "-uhttps://host/x"), cli.ExitUsage, "--git-url"},
		{[]string{"upgrade", "smi", "--version", "5"}, cli.ExitUsage, "--version"},
		{[]string{"upgrade", "smi", "--version", "5.2.0`id`"}, cli.ExitUsage, "5.2.0`id`"},
		{kmd("--max-unavailable-per", "rollbook-test/rak=1"), cli.ExitBlocked, "rollbook-test/rak that none of the"},
		{fw("--max-unavailable-per", "example.com/hostname=1"), cli.ExitBlocked, "the selected nodes carry kubernetes.io/hostname"},
		{fw("--max-parallel", "0"), cli.ExitUsage, "--max-parallel"},
		{fw("--max-parallel", "-2"), cli.ExitUsage, "--max-parallel"},
		{fw("--flash-timeout", "5s"), cli.ExitUsage, "--flash-timeout"},
		{[]string{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", "http://insecure/x"}, cli.ExitUsage, "--bundle-url"},
		{[]string{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", "ftp://host/fw.bundle"}, cli.ExitUsage, "--bundle-url"},
		{[]string{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", "https://user:secret@host/fw"}, cli.ExitUsage,
			"--bundle-url"},
		{[]string{"upgrade", "firmware", "--version", "19.0;x", "--bundle-url", bundle(t, "19.0.0")}, cli.ExitUsage, "19.0;x"},
		{fw("--bundle-sha256", "abc"), cli.ExitUsage, "--bundle-sha256"},
		// A presigned URL is accepted (it travels in a Secret), but a bad
		// one's refusal does not repeat its signature ("secret" below).
		{[]string{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", "file://host/fw?X-Amz-Signature=secret"},
			cli.ExitUsage, "?REDACTED"},
		{[]string{"cleanup", "--yes", "--dry-run"}, cli.ExitUsage, "contradict"},
		{[]string{"cleanup", "--dry-run=server"}, cli.ExitUsage, "--dry-run=server"},
		{[]string{"cleanup", "extra-arg"}, cli.ExitUsage, "extra-arg"},
		{[]string{"upgrade", "frob"}, cli.ExitUsage, "frob"},
		{[]string{"status", "-o", "xml"}, cli.ExitUsage, "--output"},
		{[]string{"status", "--probe", "--watch"}, cli.ExitUsage, "--probe"},
		{[]string{"history", "-o", "xml"}, cli.ExitUsage, "xml"},
		{[]string{"logs"}, cli.ExitUsage, "arg"},
		{[]string{"logs", "no-such-node"}, cli.ExitUsage, "no-such-node"},
		{[]string{"release", "no-such-node"}, cli.ExitUsage, "no-such-node"},
		{[]string{"pause", "extra-arg"}, cli.ExitUsage, "extra-arg"},
	}
	before := clusterSnapshot(t)
	for _, tc := range rows {
		out, code := run(t, ctx, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.msg) {
			t.Errorf("%q: exit %d (want %d), output lacks %q:\n%s", tc.args, code, tc.code, tc.msg, out)
		}
		if strings.Contains(out, "secret") {
			t.Errorf("%q: the output repeats a credential:\n%s", tc.args, out)
		}
	}
	if after := clusterSnapshot(t); after != before {
		t.Fatalf("bad input changed the cluster:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	t.Logf("%d bad inputs tried; exit codes, messages and the cluster checked", len(rows))
}

func TestOperatorInstalledIsRefused(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	labels := map[string]string{"app.kubernetes.io/name": "tt-kmd-installer"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ttdrv-default", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"none": "none"}, Containers: []corev1.Container{{Name: "b",
					Image: "x"}}}}}}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Client.AppsV1().DaemonSets(ns).Delete(context.Background(), ds.Name, metav1.DeleteOptions{})
	}()
	out, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.0")
	if code != cli.ExitBlocked || !strings.Contains(out, "tt-k8s-driver-manager operator manages tt-kmd") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if node(t, "kwok-node-0").Spec.Unschedulable {
		t.Fatal("refused run cordoned a node")
	}
}

func TestKMDUpgradeAndDowngrade(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	c := simtest.Get(t)
	ctx := simtest.Context(t, 5*time.Minute)
	plain := []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"}

	out, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--dry-run")
	if code != 0 || !strings.Contains(out, "skip "+dkmsNode) || !strings.Contains(out, "skip "+skipNode) || !strings.Contains(out,
		"planned") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	_, code = run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", strings.Join(plain, ","))
	if code != 0 {
		t.Fatalf("upgrade: exit %d", code)
	}
	built := 0
	for _, n := range plain {
		got := node(t, n)
		if got.Labels[tt.LabelKMDVersion] != "2.8.0" || got.Spec.Unschedulable || got.Labels[tt.DefaultDeployGate] != "true" {
			t.Errorf("%s after the roll: kmd %q, unschedulable %v, gate %q", n, got.Labels[tt.LabelKMDVersion], got.Spec.Unschedulable,
				got.Labels[tt.DefaultDeployGate])
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(got.Annotations[tt.AnnKMDResult]), &rec); err != nil || rec["cacheHit"] == nil {
			t.Errorf("%s: no kmd result: %v (%v)", n, rec, err)
		}
		if rec["builtBy"] == n {
			built++
		}
		if rec["persisted"] != true {
			t.Errorf("%s: the module was not made reboot-persistent (the helper's persist step warned): %v", n, rec)
		}
		if want := fakehost.FakeCommit("ttkmd-2.8.0"); rec["commit"] != want {
			t.Errorf("%s: the record names commit %v, want %s (what the tag resolved to)", n, rec["commit"], want)
		}
	}
	// 2.8.0 was never on these nodes, and they run one kernel: the first
	// builds it, all load the copy kubectl tt vouched for.
	if built != 1 {
		t.Errorf("%d of the nodes built 2.8.0, want 1 (one build per kernel)", built)
	}
	helpers, _ := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper})
	if len(helpers.Items) != 0 {
		t.Errorf("%d helper pod(s) left behind", len(helpers.Items))
	}
	// The gated telemetry DaemonSet comes back once the gate reopens.
	for _, n := range plain {
		if _, err := kube.WaitForDaemonSetPodReady(ctx, c.Client, "tt-system", "tt-telemetry", n); err != nil {
			t.Errorf("telemetry did not return to %s: %v", n, err)
		}
	}

	// Downgrade: 2.7.0 is built once and vouched for, and the node's
	// cache holds those very bytes.
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.7.0", "--nodes", "kwok-node-0"); code != 0 {
		t.Fatalf("downgrade: exit %d", code)
	}
	var rec map[string]any
	_ = json.Unmarshal([]byte(node(t, "kwok-node-0").Annotations[tt.AnnKMDResult]), &rec)
	if rec["after"] != "2.7.0" || rec["cacheHit"] != true {
		t.Fatalf("downgrade result: %v; want 2.7.0 from the module cache", rec)
	}
	// Re-running a finished roll changes nothing.
	rv := node(t, "kwok-node-1").Labels
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", "kwok-node-1"); code != 0 || fmt.Sprint(node(t,
		"kwok-node-1").Labels) != fmt.Sprint(rv) {
		t.Fatalf("re-run of a finished node: exit %d", code)
	}
}

func TestKMDBlockedByHolderThenForceUnload(t *testing.T) {
	ctx := simtest.Context(t, 5*time.Minute)
	simtest.Get(t).ExpectNoViolations(t)
	// The probe sees the host process before the cordon: nothing is disrupted.
	out, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", stubbornNode)
	if code != cli.ExitBlocked || !strings.Contains(out, "7777") || !strings.Contains(out, "--force-unload") {
		t.Fatalf("want blocked naming holder pid 7777 and the fix; exit %d", code)
	}
	n := node(t, stubbornNode)
	if n.Spec.Unschedulable {
		t.Fatalf("a node blocked by its probe must not be cordoned: %v", kube.CordonStateOf(n))
	}
	status, _ := run(t, ctx, "status", stubbornNode, "--any-node")
	if !strings.Contains(status, "7777") {
		t.Fatalf("status does not explain the stuck node:\n%s", status)
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", stubbornNode, "--force-unload"); code != 0 {
		t.Fatalf("--force-unload: exit %d", code)
	}
	n = node(t, stubbornNode)
	if n.Labels[tt.LabelKMDVersion] != "2.8.0" || n.Spec.Unschedulable {
		t.Fatalf("after --force-unload: kmd %q, unschedulable %v", n.Labels[tt.LabelKMDVersion], n.Spec.Unschedulable)
	}
}

// Stop the run the moment its helper pod exists, then re-run: the roll
// finishes and the module is swapped exactly once.
func TestKMDInterruptedAndResumed(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	c := simtest.Get(t)
	ctx := simtest.Context(t, 5*time.Minute)
	const target = "kwok-node-1"
	runCtx, cancel := context.WithCancel(ctx)
	w, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper + "=kmd"})
	if err != nil {
		t.Fatal(err)
	}
	// Every kmd helper pod created for the target, counted from the
	// cluster (not from rollbook's own records).
	var mu sync.Mutex
	created := map[types.UID]bool{}
	want := kube.HelperName("kmd", target, "2.9.0")
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok && e.Type == watch.Added && p.Name == want {
				mu.Lock()
				created[p.UID] = true
				mu.Unlock()
				cancel()
			}
		}
	}()
	out, code := run(t, runCtx, "upgrade", "kmd", "--version", "2.9.0", "--nodes", target)
	cancel()
	if code == 0 || !strings.Contains(out, "interrupted") {
		t.Fatalf("first run should have been interrupted: exit %d", code)
	}
	if !node(t, target).Spec.Unschedulable {
		t.Fatal("the interrupted node should still be cordoned")
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.0", "--nodes", target); code != 0 {
		t.Fatalf("resumed run: exit %d", code)
	}
	n := node(t, target)
	if n.Labels[tt.LabelKMDVersion] != "2.9.0" || n.Spec.Unschedulable {
		t.Fatalf("after resume: kmd %q unschedulable %v", n.Labels[tt.LabelKMDVersion], n.Spec.Unschedulable)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(created) != 1 {
		t.Fatalf("the kmd helper for 2.9.0 on %s was created %d times; want exactly once", target, len(created))
	}
}

func TestFirmwareMaxParallelAndResume(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	c := simtest.Get(t)
	ctx := simtest.Context(t, 5*time.Minute)
	// Record the most nodes out of service at once, from the cluster.
	var (
		mu       sync.Mutex
		out      = map[string]bool{}
		maxOut   int
		watchCtx context.Context
	)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := c.Client.CoreV1().Nodes().Watch(watchCtx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for e := range w.ResultChan() {
			n, ok := e.Object.(*corev1.Node)
			if !ok {
				continue
			}
			mu.Lock()
			out[n.Name] = kube.CordonStateOf(n).Owner == tt.FirmwareRunbookName
			cnt := 0
			for _, v := range out {
				if v {
					cnt++
				}
			}
			maxOut = max(maxOut, cnt)
			mu.Unlock()
		}
	}()

	// A flash that fails on the cards (after the cordon: the bundle itself
	// is checked before it) fails the first nodes and halts the rest.
	failFlash(t, true)
	res, code := run(t, ctx, "upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0"),
		"--max-parallel", "2")
	failFlash(t, false)
	if code != cli.ExitFailed || !strings.Contains(res, "FlashFailed") || !strings.Contains(res, "skipped") {
		t.Fatalf("want a failed, halted roll; exit %d", code)
	}
	// The fixed re-run resumes and finishes every node.
	if _, code := run(t, ctx, "upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0"),
		"--max-parallel", "2", "--force-unload"); code != 0 {
		t.Fatalf("re-run with a good bundle: exit %d", code)
	}
	stop()
	mu.Lock()
	if maxOut > 2 {
		t.Errorf("%d nodes were out of service at once with --max-parallel 2", maxOut)
	}
	if maxOut < 2 {
		t.Errorf("only %d node out of service at once; --max-parallel 2 should overlap", maxOut)
	}
	mu.Unlock()
	for _, name := range []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", dkmsNode, skipNode, stubbornNode} {
		n := node(t, name)
		if n.Labels[tt.LabelFirmware] != "19.0.0.0" || n.Spec.Unschedulable {
			t.Errorf("%s: firmware %q unschedulable %v", name, n.Labels[tt.LabelFirmware], n.Spec.Unschedulable)
		}
	}

	// Finished nodes are recognised from their recorded readback: nothing is flashed again…
	before := node(t, "kwok-node-0").Annotations[tt.AnnFirmwareResult]
	if _, code := run(t, ctx, "upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0"), "--nodes",
		"kwok-node-0"); code != 0 {
		t.Fatalf("re-run: exit %d", code)
	}
	if node(t, "kwok-node-0").Annotations[tt.AnnFirmwareResult] != before {
		t.Fatal("a finished node was flashed again")
	}
	// …unless --force-write asks for it.
	if _, code := run(t, ctx, "upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0"), "--nodes", "kwok-node-0",
		"--force-write"); code != 0 {
		t.Fatalf("force-write: exit %d", code)
	}
	var rec map[string]any
	_ = json.Unmarshal([]byte(node(t, "kwok-node-0").Annotations[tt.AnnFirmwareResult]), &rec)
	if rec["forced"] != true || rec["changed"] != true {
		t.Fatalf("force-write did not re-flash: %v", rec)
	}
}

func TestStatusOutputs(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	out, code := run(t, ctx, "status", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		Kind  string          `json:"kind"`
		Nodes []tt.NodeStatus `json:"items"`
	}
	if err := json.Unmarshal([]byte(out[:bytes.LastIndexByte([]byte(out), '}')+1]), &doc); err != nil || len(doc.Nodes) != 6 || doc.Kind != "NodeStatusList" {
		t.Fatalf("json: %v, kind %q, %d nodes", err, doc.Kind, len(doc.Nodes))
	}
	for _, n := range doc.Nodes {
		if n.Node == dkmsNode && (n.State != "skipped" || !strings.Contains(n.Why, "DKMS")) {
			t.Errorf("DKMS node: %+v", n)
		}
		if n.Node == "kwok-node-0" && (len(n.FirmwareDevices) != 2 || n.DeviceSummary() != "2×19.0.0.0") {
			t.Errorf("per-device firmware of kwok-node-0 after the flash: %v (%s)", n.FirmwareDevices, n.DeviceSummary())
		}
	}
	if out, _ := run(t, ctx, "status", "-o", "wide"); !strings.Contains(out, "SINCE") {
		t.Errorf("wide output lacks SINCE:\n%s", out)
	}
}

// One rolled node's API requests, by verb and resource (the breakdown is
// printed so the next cut is visible; firmware's is measured in the
// situations package, whose fleet it does not disturb). Paced requests
// (Lease renewals, step clocks, timed journal batches: a cost per second of
// the run) are counted apart. Measured on this sim: 47 (about 11 of them
// the run's own: lock, history, operator check, node list), 53 before the
// pause was watched, the shared module's record kept for the run and the
// cordon past the module step decided on one observation; 82-100 before
// observations reused rollbook's own writes. What is left per node: an
// observation after most steps (a node read unless a write just returned
// it, and a list of the node's pods), and an Event per mutation.
func TestKMDRequestsPerNode(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	rc, stop := apicount.Start()
	defer stop()
	start := time.Now()
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", "kwok-node-0"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	t.Logf("one-node kmd roll in %s: %s", time.Since(start).Round(time.Millisecond), rc.Breakdown())
	if testing.Verbose() {
		t.Logf("in order:\n%s", rc.Paths())
	}
	// 50, and the cordon's list of the PDBs over the pods it would evict
	// (#27); three node writes fewer since the cordon closes the gates and
	// the label reopens them and uncordons, each in one write (#29); +2
	// since the module is built in a kmd-build helper of its own, before the
	// cordon (its pod created, watched and deleted; the dry run of its
	// shape), which the kmd helper no longer does; one more for the kmd
	// helper's own PodDisruptionBudget (#39); one more per run (not per
	// node) for the list of the flash helpers that finds a needs-person
	// record a killed run never wrote (#41).
	if got := rc.Total(); got > 52 {
		t.Errorf("a one-node kmd roll made %d API requests (limit 52): %s\n%s", got, rc.Breakdown(), rc.Paths())
	}
}

// A PodDisruptionBudget that allows no eviction met by the drain of a node
// already cordoned (a resumed run; a fresh run refuses it before the
// cordon, test/e2e/tt/pdbfirst): the run stops (exit 3) naming the pod
// and the PDB, leaves the node cordoned, and status says the same;
// removing the PDB lets a re-run finish.
func TestKMDDrainBlockedByPDB(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	c := simtest.Get(t)
	ctx := simtest.Context(t, 3*time.Minute)
	ns := c.NewNamespace(t)
	const target = "kwok-node-0"
	labels := map[string]string{"app": "precious"}
	one := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "precious", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"kubernetes.io/hostname": target},
				Volumes: []corev1.Volume{{Name: "dev",
					VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/tenstorrent"}}}},
				Containers: []corev1.Container{{Name: "c", Image: "example.com/precious",
					VolumeMounts: []corev1.VolumeMount{{Name: "dev", MountPath: "/dev/tenstorrent"}}}},
			}}}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "precious-pdb", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrIntStr(1), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.WaitForDeploymentAvailable(ctx, c.Client, ns, "precious"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "precious-pdb", metav1.GetOptions{})
		if err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("PDB never observed")
		}
	}
	// An earlier run of tt-kmd cordoned the node and stopped before its drain.
	if _, err := kube.CordonNode(ctx, c.Client, noRecorder{}, node(t, target), tt.KMDRunbookName, "earlier-run"); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.1", "--nodes", target, "--drain-timeout", "5s")
	if code != cli.ExitBlocked || !strings.Contains(out, "precious-pdb") || !strings.Contains(out, "still cordoned") {
		t.Fatalf("want blocked naming the PDB and the cordon left: exit %d", code)
	}
	status, _ := run(t, ctx, "status", target)
	if !strings.Contains(status, "drain blocked") || !strings.Contains(status, "precious-pdb") {
		t.Fatalf("status does not name the blocking PDB:\n%s", status)
	}
	if err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "precious-pdb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node is still cordoned mid-drain, but no PDB is at zero: status
	// knows that from its one PDB list and reads no node's pods.
	rc, stop := apicount.Start()
	status, _ = run(t, ctx, "status", target)
	stop()
	if strings.Contains(status, "drain blocked") || strings.Contains(rc.Paths(), "spec.nodeName") {
		t.Fatalf("with no PDB at zero, status must not read the draining node's pods nor say its drain is blocked:\n%s\n%s",
			status, rc.Paths())
	}
	// The blocked step ended, so the same command after the fix gets a fresh
	// budget (only an interrupted step keeps its clock).
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.1", "--nodes", target, "--drain-timeout", "5s"); code != 0 {
		t.Fatalf("after removing the PDB: exit %d", code)
	}
	if n := node(t, target); n.Labels[tt.LabelKMDVersion] != "2.9.1" || n.Spec.Unschedulable {
		t.Fatalf("after the fix: kmd %q unschedulable %v", n.Labels[tt.LabelKMDVersion], n.Spec.Unschedulable)
	}
}

type noRecorder struct{}

func (noRecorder) Record(context.Context, corev1.ObjectReference, bool, string, string) {}

func ptrIntStr(v int) *intstr.IntOrString { x := intstr.FromInt32(int32(v)); return &x }

// failFlash makes every card of every simulated host fail its flash
// (fail) or flash again (!fail).
func failFlash(t *testing.T, fail bool) {
	t.Helper()
	roots, err := filepath.Glob(filepath.Join(simtest.Get(t).Dir, "hosts", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range roots {
		if st, err := os.Stat(root); err != nil || !st.IsDir() || strings.HasPrefix(filepath.Base(root), ".") {
			continue
		}
		if err := fakehost.SetFailFlash(root, -1, fail); err != nil {
			t.Fatalf("%s: %v", root, err)
		}
	}
}

// version asks the API server its version and finds it in the supported
// range (the sim's Kubernetes is the newest tested); --client asks nothing.
func TestVersionReportsTheServer(t *testing.T) {
	c := simtest.Get(t)
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	if code := cli.ExecuteContext(t.Context(), ttcmd.NewRootCommand(streams),
		[]string{"version", "-o", "json", "--kubeconfig", c.Kubeconfig}, errOut); code != 0 {
		t.Fatalf("version: exit %d\n%s", code, errOut)
	}
	var r struct {
		Version       string `json:"version"`
		ServerVersion *struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	if r.Version == "" || r.ServerVersion == nil || !strings.HasPrefix(r.ServerVersion.GitVersion, "v1.") || len(r.Warnings) > 0 {
		t.Fatalf("version -o json against the sim: %s", out)
	}
	streams, _, out, errOut = genericiooptions.NewTestIOStreams()
	if code := cli.ExecuteContext(t.Context(), ttcmd.NewRootCommand(streams),
		[]string{"version", "--client", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, errOut); code != 0 ||
		strings.Contains(out.String()+errOut.String(), "server") {
		t.Fatalf("version --client: exit %d\n%s%s", code, out, errOut)
	}
}
