//go:build e2e

package vouch

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Four plain nodes of one kernel at tt-kmd 2.7.0 (tt-fleet keeps fewer than
// five nodes plain).
func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet"}) }

var host, node = tttest.Host, tttest.Node

// The module a node built is swapped in its ConfigMap the moment the CLI
// publishes it, for a module that loads as well and a record that agrees
// with it: no node loads it, each node that was given it refuses it before
// unloading anything (its driver stays), and the run says so. A re-run
// replaces the ConfigMap and finishes.
func TestModuleChangedAfterItsBuildIsRefused(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	nodes := []string{"kwok-node-0", "kwok-node-1"}
	args := []string{"upgrade", "kmd", "--version", "2.8.0", "--nodes", strings.Join(nodes, ","), "--max-failures", "2"}

	was := map[string]string{}
	for _, n := range nodes {
		was[n] = host(t, n).LoadedKMD
	}
	stop := tamperEveryPublished(t, ctx, c.Client)
	out, code := tttest.Run(t, ctx, args...)
	bad := stop()
	if len(bad) == 0 {
		t.Fatal("no shared module was published to tamper with")
	}
	if code != cli.ExitFailed {
		t.Errorf("exit %d, want %d: a node was given a module changed after its build", code, cli.ExitFailed)
	}
	neverLoaded(t, bad, nodes...)
	refused := 0
	for _, n := range nodes {
		switch h := host(t, n); h.LoadedKMD {
		case was[n]:
			refused++
			if nd := node(t, n); nd.Spec.Unschedulable && nd.Annotations[kube.AnnLeftCordoned] == "" {
				t.Errorf("node %s was left cordoned without saying why", n)
			}
		case "2.8.0":
		default:
			t.Errorf("node %s runs tt-kmd %q: left without its driver", n, h.LoadedKMD)
		}
	}
	if refused == 0 {
		t.Error("no node refused the changed module")
	}
	if !strings.Contains(out, "SHA-256") {
		t.Error("the output does not say the module's SHA-256 is not the one vouched for")
	}

	// A re-run does not trust the ConfigMap it finds: it builds again,
	// reports the one that holds other bytes (the operator role cannot
	// delete it: that is the admin's), publishes under another name, and
	// every node loads what was built.
	out, code = tttest.Run(t, ctx, args...)
	if code != 0 {
		t.Fatalf("re-run: exit %d\n%s", code, out)
	}
	neverLoaded(t, bad, nodes...)
	for _, n := range nodes {
		if h := host(t, n); h.LoadedKMD != "2.8.0" {
			t.Errorf("after the re-run node %s runs %q", n, h.LoadedKMD)
		}
	}
	reported(t, ctx, c.Client, out, bad, "2.8.0")
}

// A module shared by an earlier run is changed between runs (its
// ConfigMap deleted and created again with other bytes and a record that
// agrees): the next run on another node of the kernel does not load it.
func TestModuleChangedBetweenRunsIsNotLoaded(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	if out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", "kwok-node-2"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	cms := sharedModules(t, ctx, c.Client, "2.8.1")
	if len(cms) != 1 {
		t.Fatalf("%d shared modules of 2.8.1 after the first run, want 1", len(cms))
	}
	bad := map[string]bool{tamper(t, ctx, c.Client, &cms[0]): true}

	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", "kwok-node-3")
	if code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}
	neverLoaded(t, bad, "kwok-node-3")
	if h := host(t, "kwok-node-3"); h.LoadedKMD != "2.8.1" {
		t.Errorf("node kwok-node-3 runs %q", h.LoadedKMD)
	}
	if n := node(t, "kwok-node-3"); n.Labels[tt.LabelKMDVersion] != "2.8.1" || n.Spec.Unschedulable {
		t.Errorf("kwok-node-3: label %q, unschedulable %v", n.Labels[tt.LabelKMDVersion], n.Spec.Unschedulable)
	}
	reported(t, ctx, c.Client, out, bad, "2.8.1")
	// What the node loaded is what a build of 2.8.1 for its kernel is.
	want := hexSHA(fakehost.BuiltKernelObject(tttest.HostRoot(t, "kwok-node-3"), "2.8.1",
		node(t, "kwok-node-3").Status.NodeInfo.KernelVersion))
	if l := loaded(t, "kwok-node-3"); len(l) == 0 || l[len(l)-1] != want {
		t.Errorf("kwok-node-3 loaded %v, want the build %s", l, want)
	}
}

// reported checks a run that met a ConfigMap of version holding one of bad
// said so, in its output and in a Warning Event, naming it.
func reported(t *testing.T, ctx context.Context, cs kubernetes.Interface, out string, bad map[string]bool, version string) {
	t.Helper()
	var held []string
	for _, cm := range sharedModules(t, ctx, cs, version) {
		if bad[hexSHA(gunzip(t, cm.BinaryData[moduleKey]))] {
			held = append(held, cm.Name)
		}
	}
	if len(held) == 0 {
		return // the run met none (it published under a name no one took)
	}
	events, err := cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=KMDModuleRefused"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range held {
		if !strings.Contains(out, name) {
			t.Errorf("the run's output does not name configmap %s, which holds the changed module", name)
		}
		found := false
		for _, e := range events.Items {
			found = found || (e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, name))
		}
		if !found {
			t.Errorf("no Warning Event KMDModuleRefused names configmap %s", name)
		}
	}
}

// A build that breaks (a compiler mismatch) fails its node before its
// cordon: builds run on nodes still in service, and nothing on the node
// changes.
func TestBrokenBuildFailsBeforeTheCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-2"
	root := tttest.HostRoot(t, target)
	if err := fakehost.SetBrokenBuild(root, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fakehost.SetBrokenBuild(root, false) })
	was := host(t, target).LoadedKMD
	ops, _ := fakehost.Ops(root)
	untouched := c.NeverCordoned(t, ctx, target)
	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.10.0", "--nodes", target)
	if code != cli.ExitFailed || !strings.Contains(out, "BuildFailed") || !strings.Contains(out, "not taken out of service") {
		t.Errorf("exit %d, want %d saying the build failed and the node stayed in service", code, cli.ExitFailed)
	}
	if !untouched() {
		t.Error("the node was cordoned for a build")
	}
	if after, _ := fakehost.Ops(root); len(after) != len(ops) || host(t, target).LoadedKMD != was {
		t.Errorf("the host changed: %v", after[len(ops):])
	}
}
