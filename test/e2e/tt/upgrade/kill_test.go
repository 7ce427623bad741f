//go:build e2e

package upgrade

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// A run killed with SIGKILL while its helper runs (what a closed laptop or a
// dropped SSH session does) is resumed by running the same command again,
// with no extra flag: the dead holder's lease is taken over at once, the
// module is swapped exactly once, and the history has each mutation once.
func TestKMDKilledMidRunResumesWithNoFlag(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	bin, err := simtest.AgentBinary() // the kubectl-tt built from this tree
	if err != nil {
		t.Fatal(err)
	}
	const target = "kwok-node-0"
	version := "2.9.1"
	if node(t, target).Labels[tt.LabelKMDVersion] == version {
		version = "2.8.1"
	}
	args := []string{"upgrade", "kmd", "--version", version, "--nodes", target}

	w, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper + "=kmd"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The two runs' history: entries from before are an earlier test's
	// (one that rolled the same version here within minutes counted twice).
	since := time.Now().Add(-time.Second)
	cmd := exec.Command(bin, append(args, "--kubeconfig", c.Kubeconfig)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Count every kmd helper pod created, across both runs, from the cluster.
	added := make(chan string, 16)
	go func() {
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok && e.Type == watch.Added {
				added <- p.Name
			}
		}
		close(added)
	}()
	var created []string
	select {
	case name := <-added:
		_ = cmd.Process.Signal(syscall.SIGKILL)
		created = append(created, name)
	case <-ctx.Done():
		t.Fatalf("no helper pod appeared:\n%s", out.String())
	}
	_ = cmd.Wait()
	t.Logf("killed run:\n%s", out.String())
	if n := node(t, target); !n.Spec.Unschedulable {
		t.Fatal("the killed run should have left its node cordoned mid-roll")
	}

	start := time.Now()
	res, code := run(t, ctx, args...)
	if code != 0 {
		t.Fatalf("the same command after kill -9: exit %d", code)
	}
	if !strings.Contains(res, "took over from") || strings.Contains(res, "--steal-lock:") {
		t.Fatalf("the resumed run must take the dead run's lock over by itself and say so:\n%s", res)
	}
	t.Logf("resumed in %s", time.Since(start).Round(time.Millisecond))
	n := node(t, target)
	if n.Labels[tt.LabelKMDVersion] != version || n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] != "" {
		t.Fatalf("after resume: kmd %q unschedulable %v annotations %v", n.Labels[tt.LabelKMDVersion], n.Spec.Unschedulable, n.Annotations)
	}
	// Each mutation of the two runs is in the history exactly once.
	entries, _, err := journal.Read(context.Background(), c.Client, "kube-system", journal.Name("tt"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range entries {
		if e.Object == "node/"+target && e.Time.After(since) && e.Reason == "Cordoned" &&
			strings.Contains(e.Command, version) {
			seen[e.Reason]++
		}
	}
	if seen["Cordoned"] != 1 {
		t.Fatalf("the node was cordoned %d times across the killed and the resumed run (history %v)", seen["Cordoned"], seen)
	}
	w.Stop()
	for name := range added {
		created = append(created, name)
	}
	if len(created) != 1 {
		t.Fatalf("kmd helper pods created across the killed and the resumed run: %v; want exactly one", created)
	}

}

// `kubectl tt pause` stops a roll between nodes: the node in flight
// finishes, no other starts, the run exits 0 "paused", status says who
// paused it; after `resume` the same command finishes the roll.
func TestPauseBetweenNodesThenResume(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	nodes := []string{"kwok-node-1", "kwok-node-2"}
	version := "2.8.1"
	for _, n := range nodes {
		if node(t, n).Labels[tt.LabelKMDVersion] == version {
			version = "2.9.0"
		}
	}
	// Pause as soon as the first node's kmd helper appears.
	w, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper + "=kmd"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			if e.Type == watch.Added {
				run(t, ctx, "pause", "--reason", "look at the first node")
				return
			}
		}
	}()
	args := []string{"upgrade", "kmd", "--version", version, "--nodes", strings.Join(nodes, ",")}
	out, code := run(t, ctx, args...)
	if code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("a paused roll exits 0 with \"paused\": exit %d", code)
	}
	first, second := node(t, nodes[0]), node(t, nodes[1])
	if first.Labels[tt.LabelKMDVersion] != version || first.Spec.Unschedulable {
		t.Fatalf("the node in flight must finish: %v unschedulable %v", first.Labels[tt.LabelKMDVersion], first.Spec.Unschedulable)
	}
	if second.Labels[tt.LabelKMDVersion] == version || second.Spec.Unschedulable {
		t.Fatal("a paused roll started another node")
	}
	if st, _ := run(t, ctx, "status"); !strings.Contains(st, "PAUSED") || !strings.Contains(st, "look at the first node") {
		t.Fatal("status does not show the pause")
	}
	if out, code := run(t, ctx, args...); code != 0 || node(t, nodes[1]).Labels[tt.LabelKMDVersion] == version {
		t.Fatalf("a new run must honour the pause: exit %d\n%s", code, out)
	}
	if _, code := run(t, ctx, "resume"); code != 0 {
		t.Fatal("resume failed")
	}
	if _, code := run(t, ctx, args...); code != 0 || node(t, nodes[1]).Labels[tt.LabelKMDVersion] != version {
		t.Fatalf("after resume the same command finishes the roll: exit %d", code)
	}
}

// After a run that will not be resumed (killed, abandoned), `release` lifts
// only what rollbook set — its cordon and closed deploy gates, restored to
// their prior values — and never a cordon someone else set.
func TestReleaseAfterAnAbandonedRun(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	bin, err := simtest.AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	const abandoned, foreign = "kwok-node-2", "kwok-node-1"
	priorGate, hadGate := node(t, abandoned).Labels[tt.DefaultDeployGate]
	// Someone else cordons another node: release must leave it cordoned.
	if _, err := kube.SetNodeKeys(ctx, c.Client, foreign, kube.NodeChange{Unschedulable: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = kube.SetNodeKeys(context.Background(), c.Client, foreign, kube.NodeChange{Unschedulable: ptr.To(false)})
	})
	version := "2.8.1"
	if node(t, abandoned).Labels[tt.LabelKMDVersion] == version {
		version = "2.9.0"
	}
	w, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper + "=kmd"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "upgrade", "kmd", "--version", version, "--nodes", abandoned, "--kubeconfig", c.Kubeconfig)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var helper *corev1.Pod
	for helper == nil {
		select {
		case e := <-w.ResultChan():
			if p, ok := e.Object.(*corev1.Pod); ok && e.Type == watch.Added {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				helper = p
			}
		case <-ctx.Done():
			t.Fatal("no helper pod appeared")
		}
	}
	w.Stop()
	_ = cmd.Wait()
	n := node(t, abandoned)
	if kube.CordonStateOf(n).Owner != tt.KMDRunbookName || n.Labels[tt.DefaultDeployGate] != "false" {
		t.Fatalf("the abandoned run should have left its cordon and closed gate: %v, gate %q", kube.CordonStateOf(n),
			n.Labels[tt.DefaultDeployGate])
	}
	// Its helper finishes on its own; release waits for that (a guard).
	if _, err := kube.WaitForPod(ctx, c.Client, helper.Namespace, helper.Name, kube.PodTerminal); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, "release", "--dry-run"); code != 0 || !strings.Contains(out, abandoned) ||
		!node(t, abandoned).Spec.Unschedulable {
		t.Fatalf("release --dry-run: exit %d, or it changed the node", code)
	}
	if _, code := run(t, ctx, "release"); code != 0 {
		t.Fatalf("release: exit %d", code)
	}
	n = node(t, abandoned)
	gate, hasGate := n.Labels[tt.DefaultDeployGate]
	if n.Spec.Unschedulable || gate != priorGate || hasGate != hadGate || n.Annotations[tt.AnnGatesPrior] != "" ||
		n.Annotations[kube.AnnCordonedBy] != "" {
		t.Fatalf("after release: unschedulable %v, gate %q (prior %q), annotations %v", n.Spec.Unschedulable, gate, priorGate,
			n.Annotations)
	}
	if !node(t, foreign).Spec.Unschedulable {
		t.Fatal("release lifted a cordon rollbook did not set")
	}
	// The node's helper pod is gone or finished; the next upgrade redoes the node.
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", abandoned); code != 0 {
		t.Fatalf("the upgrade after a release: exit %d", code)
	}
}
