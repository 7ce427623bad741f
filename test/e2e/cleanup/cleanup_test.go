//go:build e2e

// Package cleanup proves `kubectl tt cleanup` on the sim: after a roll its
// dry run lists what the run left and changes nothing, --yes removes it,
// a second cleanup finds nothing; mid-roll and with a node half-way it is
// refused and removes nothing. The README's "What a run leaves behind"
// rests on this test.
package cleanup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "tt-fleet"}) }

// tt_ runs kubectl tt against this package's simulated cluster.
var tt_ = tttest.Run

// TestCleanupAfterARoll: refused mid-roll (a run holds the Lease, its
// helper runs) and with a node left half-way by a killed run; after the
// roll finished, the dry run lists the Lease, the history and the nodes'
// records and changes nothing, --yes removes exactly those, and a second
// cleanup finds nothing.
func TestCleanupAfterARoll(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	const target = "kwok-node-0"

	// Mid-roll: stop the roll once its kmd helper exists, and clean up
	// while the run still holds the Lease.
	w, err := c.Client.CoreV1().Pods(deploy.HelperNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper + "=kmd"})
	if err != nil {
		t.Fatal(err)
	}
	// The module swap lasts long enough for cleanup to find its helper
	// Running (the module is built before, in kmd-build: the swap alone is
	// quick on the fake host).
	root := filepath.Join(c.Dir, "hosts", target)
	if err := fakehost.SetDelays(root, 0, 8*time.Second); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tt_(t, runCtx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", target)
	}()
	defer func() { cancel(); <-done }() // never log after the test ended
	// Wait for the helper to run, not just to exist: cleanup names a
	// Pending helper differently, and a loaded node starts it late.
	for e := range w.ResultChan() {
		p, ok := e.Object.(*corev1.Pod)
		if !ok || e.Type == watch.Deleted || p.Spec.NodeName != target {
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			break
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			t.Fatalf("the kmd helper ended (%s) before the test saw it run", p.Status.Phase)
		}
	}
	w.Stop()
	out, code := tt_(t, ctx, "cleanup", "--yes")
	if code != cli.ExitLocked || !strings.Contains(out, "a run holds Lease kube-system/"+tt.LockName) ||
		!strings.Contains(out, "is Running; wait until it ends") || !strings.Contains(out, "nothing was removed") {
		t.Fatalf("cleanup mid-roll: want exit 4 naming the holder and the running helper; exit %d", code)
	}
	// The run goes on changing things: what cleanup would remove is there.
	if l, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{}); err != nil ||
		l.Spec.HolderIdentity == nil {
		t.Fatalf("the refused cleanup took the running roll's Lease: %v", err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, journal.Name("tt"), metav1.GetOptions{}); err != nil {
		t.Fatalf("the refused cleanup removed the history: %v", err)
	}
	cancel()
	<-done
	if err := fakehost.SetDelays(root, 0, 0); err != nil {
		t.Fatal(err)
	}

	// The killed run left the node cordoned: half-way, refused, named.
	if n, _ := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{}); tt.HalfWay(n) == "" {
		t.Fatalf("the interrupted run left %s not half-way: %v", target, n.Annotations)
	}
	before := state(t, ctx)
	out, code = tt_(t, ctx, "cleanup", "--yes")
	if code != cli.ExitBlocked || !strings.Contains(out, "node "+target+" is half-way") || !strings.Contains(out, "Re-run the upgrade") {
		t.Fatalf("cleanup with a half-way node: want exit 3 naming it and how to finish; exit %d", code)
	}
	if after := state(t, ctx); after != before {
		t.Fatalf("a refused cleanup changed the cluster:\nbefore %s\nafter  %s", before, after)
	}

	// Finish the roll; now everything the runs left is listed.
	if _, code := tt_(t, ctx, "upgrade", "kmd", "--version", "2.8.0"); code != 0 {
		t.Fatalf("the roll: exit %d", code)
	}
	before = state(t, ctx)
	out, code = tt_(t, ctx, "cleanup")
	if code != 0 {
		t.Fatalf("cleanup dry run: exit %d", code)
	}
	for _, want := range []string{
		"would remove lease/kube-system/" + tt.LockName,
		"would remove configmap/kube-system/" + journal.Name("tt"),
		"would remove node/kwok-node-0: annotations", "would remove node/kwok-node-1: annotations",
		tt.AnnKMDResult, "(dry run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run does not list %q", want)
		}
	}
	if after := state(t, ctx); after != before {
		t.Fatalf("the dry run changed the cluster:\nbefore %s\nafter  %s", before, after)
	}
	nodesBefore, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The module cache on each host, which only --host-caches removes.
	caches := map[string]string{}
	for _, n := range nodesBefore.Items {
		caches[n.Name] = filepath.Join(c.Dir, "hosts", n.Name, "var", "cache", "tt-kmd")
		if _, err := os.Stat(caches[n.Name]); err != nil {
			t.Fatalf("the roll left no module cache on %s: %v", n.Name, err)
		}
	}
	if out, code := tt_(t, ctx, "cleanup", "--host-caches"); code != 0 || !strings.Contains(out, "would remove node/kwok-node-0: host caches") {
		t.Fatalf("cleanup --host-caches dry run: exit %d, want the host caches listed", code)
	}
	if after := state(t, ctx); after != before {
		t.Fatalf("the --host-caches dry run changed the cluster:\nbefore %s\nafter  %s", before, after)
	}
	if out, code := tt_(t, ctx, "cleanup", "--yes"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("cleanup --yes: exit %d", code)
	}
	for node, dir := range caches {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("cleanup without --host-caches removed %s's module cache: %v", node, err)
		}
	}
	if out, code := tt_(t, ctx, "cleanup", "--yes", "--host-caches"); code != 0 || !strings.Contains(out, "removed /var/cache/tt-kmd") {
		t.Fatalf("cleanup --yes --host-caches: exit %d, want each node's removed cache named", code)
	}
	for node, dir := range caches {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s's module cache is still there: %v", node, err)
		}
	}
	if _, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{}); err == nil {
		t.Error("the Lease is still there")
	}
	if _, err := c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, journal.Name("tt"), metav1.GetOptions{}); err == nil {
		t.Error("the history ConfigMap is still there")
	}
	for _, was := range nodesBefore.Items {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, was.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range tt.CleanupAnnotations {
			if _, ok := n.Annotations[k]; ok {
				t.Errorf("%s still has %s", n.Name, k)
			}
		}
		// Only the bookkeeping went: the public labels DaemonSets select
		// on, every other annotation and the cordon state are untouched.
		if n.Labels[tt.LabelKMDVersion] != "2.8.0" || len(n.Labels) != len(was.Labels) || n.Spec.Unschedulable != was.Spec.Unschedulable {
			t.Errorf("%s: labels %v → %v, unschedulable %v → %v", n.Name, was.Labels, n.Labels, was.Spec.Unschedulable, n.Spec.Unschedulable)
		}
		for k, v := range was.Annotations {
			if _, gone := n.Annotations[k]; !gone && !contains(tt.CleanupAnnotations, k) || gone && n.Annotations[k] != v {
				t.Errorf("%s: annotation %s changed (%q)", n.Name, k, v)
			}
		}
	}
	if out, code := tt_(t, ctx, "cleanup"); code != 0 || !strings.Contains(out, "nothing to clean up") {
		t.Fatalf("a second cleanup: exit %d, want nothing to clean up", code)
	}
	if pods, err := c.Client.CoreV1().Pods(deploy.HelperNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("helpers left in %s after cleanup: %v %v", deploy.HelperNamespace, pods, err)
	}
	// A roll after cleanup starts from scratch: it needs nothing removed.
	if out, code := tt_(t, ctx, "status"); code != 0 || !strings.Contains(out, "2.8.0") {
		t.Fatalf("status after cleanup: exit %d", code)
	}
}

// state is everything cleanup may remove or change, read from the
// cluster: Leases and ConfigMaps in kube-system, the nodes' labels,
// annotations and cordon, the pods and Secrets in the helper namespace.
func state(t *testing.T, ctx context.Context) string {
	t.Helper()
	cs := simtest.Get(t).Client
	var b strings.Builder
	leases, err := cs.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "rollbook") {
			fmt.Fprintf(&b, "lease %s %s\n", l.Name, l.ResourceVersion)
		}
	}
	cms, err := cs.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		fmt.Fprintf(&b, "configmap %s %s\n", cm.Name, cm.ResourceVersion)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		delete(n.Annotations, "node.alpha.kubernetes.io/ttl")
		fmt.Fprintf(&b, "node %s %v %v %v\n", n.Name, n.Labels, n.Annotations, n.Spec.Unschedulable)
	}
	pods, err := cs.CoreV1().Pods(deploy.HelperNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s %s\n", p.Name, p.UID)
	}
	secrets, err := cs.CoreV1().Secrets(deploy.HelperNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		fmt.Fprintf(&b, "secret %s %s\n", s.Name, s.ResourceVersion)
	}
	return b.String()
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestHelperNeverOnControlPlane: a helper kept off control-plane nodes is
// refused by the node (the sim's runner, as a kubelet: NodeAffinity) when
// pinned to one; the run stops before any change, and cleanup removes the
// failed helper it kept.
func TestHelperNeverOnControlPlane(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-1"
	label := func(v *string) {
		t.Helper()
		n, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v == nil {
			delete(n.Labels, kube.LabelControlPlane)
		} else {
			n.Labels[kube.LabelControlPlane] = *v
		}
		if _, err := c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	empty := ""
	label(&empty)
	defer label(nil)
	was, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, code := tt_(t, ctx, "upgrade", "kmd", "--version", "2.7.0", "--nodes", target)
	if code == 0 || !strings.Contains(out, "NodeAffinity") {
		t.Fatalf("a helper pinned to a control-plane node: want the run stopped naming NodeAffinity; exit %d", code)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != was.Labels[tt.LabelKMDVersion] {
		t.Fatalf("the refused helper's run changed %s: unschedulable %v, kmd %q", target, n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion])
	}
	label(nil)
	if out, code := tt_(t, ctx, "cleanup", "--yes"); code != 0 || !strings.Contains(out, "helper on "+target+" (Failed)") {
		t.Fatalf("cleanup --yes: exit %d, want the failed helper removed", code)
	}
	if pods, err := c.Client.CoreV1().Pods(deploy.HelperNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("helpers left after cleanup: %v", err)
	}
}
