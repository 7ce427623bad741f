//go:build e2e

// Package kernelgroups rolls tt-kmd over a simulated fleet whose nodes run
// two kernels: one build per kernel, shared with the rest of its group, and
// parallel nodes within --max-parallel, --max-unavailable-per and
// --max-failures.
package kernelgroups

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Node i runs kernel i mod 2; the tt-fleet scenario's last three nodes are
// awkward (DKMS, skipped, a stubborn holder) and not rolled here.
var kernels = []string{"6.1.0-28-amd64", "6.1.0-31-amd64"}

const (
	rolled = 6
	rack   = "example.com/rack"
)

func TestMain(m *testing.M) {
	// The sim's hosts read these when the scenario starts (simtest passes
	// the environment through).
	_ = os.Setenv("ROLLBOOK_SIM_TT_KERNELS", strings.Join(kernels, ","))
	_ = os.Setenv("ROLLBOOK_SIM_TT_BUILD_DELAY", "2s")
	// The tests drain up to 3 nodes at once (--max-parallel 3): the
	// inference PDB lets as many replicas go (scenario.EnvPDBDisruptions).
	// At 1, a drain's eviction briefly leaves the budget's pod count one
	// short before the replacement exists, and with minAvailable an integer
	// that reads as "every pod healthy at 0": the next cordon refused it as
	// needing a person (CI, 2026-12-07).
	_ = os.Setenv("ROLLBOOK_SIM_TT_PDB_DISRUPTIONS", "3")
	simtest.Main(m, simtest.Options{Nodes: rolled + 3, Scenario: "tt-fleet"})
}

func nodes(n int) string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("kwok-node-%d", i))
	}
	return strings.Join(out, ",")
}

// run runs kubectl tt against this package's simulated cluster.
var run = tttest.Run

// After --max-failures nodes failed no other node is taken out of service
// (those in flight finish); the failed ones stay cordoned, saying why, until
// a re-run fixes them (the next test).
func TestMaxFailuresStopsStartingNodes(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	// The module does not load (it needs symbols the kernel lacks):
	// something the probe cannot know, so every helper fails after its
	// node's cordon (the old module put back). A build that breaks fails
	// before the cordon instead: builds run on nodes still in service.
	for i := range 4 {
		root := filepath.Join(c.Dir, "hosts", fmt.Sprintf("kwok-node-%d", i))
		if err := fakehost.SetUnresolved(root, "2.9.0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fakehost.SetUnresolved(root) })
	}
	w := watchOut(t, ctx)
	_, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.0", "--nodes", nodes(4), "--max-parallel", "2",
		"--max-failures", "2")
	if code != cli.ExitFailed {
		t.Fatalf("exit %d, want %d", code, cli.ExitFailed)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Two start (whichever two probe first); the others are never taken out.
	if len(w.ever) != 2 {
		t.Errorf("%d nodes were taken out of service, want the 2 the failure budget allows: %v", len(w.ever), w.ever)
	}
	for name := range w.ever {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] == "" {
			t.Errorf("failed node %s: cordoned %v, left-cordoned note %q", name, n.Spec.Unschedulable, n.Annotations[kube.AnnLeftCordoned])
		}
	}
}

// outWatch records, from a watch on the nodes, the most nodes rollbook had
// out of service at once, in all and per rack.
type outWatch struct {
	mu      sync.Mutex
	out     map[string]string // node → rack
	ever    map[string]bool
	most    int
	perRack map[string]int
}

func watchOut(t *testing.T, ctx context.Context) *outWatch {
	t.Helper()
	w := &outWatch{out: map[string]string{}, ever: map[string]bool{}, perRack: map[string]int{}}
	ww, err := simtest.Get(t).Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer ww.Stop()
		for ev := range ww.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Error {
				continue
			}
			w.mu.Lock()
			if st := kube.CordonStateOf(n); st.Cordoned && st.Owner != "" {
				w.out[n.Name] = n.Labels[rack]
				w.ever[n.Name] = true
			} else {
				delete(w.out, n.Name)
			}
			w.most = max(w.most, len(w.out))
			count := map[string]int{}
			for _, r := range w.out {
				count[r]++
				w.perRack[r] = max(w.perRack[r], count[r])
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// The first node of each kernel group builds, before its cordon; kubectl tt
// vouches for the module and every node of the group loads it: two builds
// for six nodes.
// Three nodes at most are out of service at once, one per rack.
func TestBuildOncePerKernelInParallel(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	// The nodes the previous test left cordoned are out of service already:
	// one rack each, so the limit is the run's to keep, not broken before it.
	racks := map[string]string{}
	for i := range rolled {
		name := fmt.Sprintf("kwok-node-%d", i)
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st := kube.CordonStateOf(n); st.Cordoned && st.Owner != "" {
			racks[name] = fmt.Sprintf("r%d", len(racks)%3)
		}
	}
	next := 0
	for i := range rolled {
		name := fmt.Sprintf("kwok-node-%d", i)
		if _, ok := racks[name]; !ok {
			racks[name] = fmt.Sprintf("r%d", next%3)
			next++
		}
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{rack: racks[name]}}})
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"upgrade", "kmd", "--version", "2.8.1", "--nodes", nodes(rolled), "--max-parallel", "3",
		"--max-unavailable-per", rack + "=1"}

	// The plan says who builds and who reuses, before anything happens.
	plan, code := run(t, ctx, append(args, "--dry-run")...)
	if code != 0 {
		t.Fatalf("dry run: exit %d", code)
	}
	for _, k := range kernels {
		if n := strings.Count(plan, "builds tt-kmd 2.8.1 for kernel "+k+" and shares it"); n != 1 {
			t.Errorf("the plan names %d builders for kernel %s, want 1", n, k)
		}
	}
	if n := strings.Count(plan, "would reuse node/"); n != rolled-len(kernels) {
		t.Errorf("the plan has %d nodes reusing a module, want %d", n, rolled-len(kernels))
	}

	w := watchOut(t, ctx)
	if _, code := run(t, ctx, args...); code != 0 {
		t.Fatalf("exit %d", code)
	}
	builds := map[string]int{}
	for i := range rolled {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, fmt.Sprintf("kwok-node-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			After   string `json:"after"`
			Kernel  string `json:"kernel"`
			BuiltBy string `json:"builtBy"`
		}
		if err := json.Unmarshal([]byte(n.Annotations[tt.AnnKMDResult]), &rec); err != nil || rec.After != "2.8.1" || rec.BuiltBy == "" {
			t.Fatalf("node %s: result %q", n.Name, n.Annotations[tt.AnnKMDResult])
		}
		if rec.BuiltBy == n.Name {
			builds[rec.Kernel]++
		}
		if n.Spec.Unschedulable {
			t.Errorf("node %s is still cordoned", n.Name)
		}
	}
	for _, k := range kernels {
		if builds[k] != 1 {
			t.Errorf("kernel %s: %d builds, want exactly 1 (%v)", k, builds[k], builds)
		}
	}
	cms, err := c.Client.CoreV1().ConfigMaps(deploy.HelperNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: tt.LabelSharedModule + "=2.8.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != len(kernels) {
		t.Errorf("%d shared modules published, want one per kernel (%d)", len(cms.Items), len(kernels))
	}
	for _, cm := range cms.Items {
		if cm.Immutable == nil || !*cm.Immutable || len(cm.BinaryData["tenstorrent.ko.gz"]) == 0 {
			t.Errorf("configmap %s: not an immutable module", cm.Name)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("most nodes out of service at once: %d; per rack: %v", w.most, w.perRack)
	if w.most > 3 || w.most < 2 {
		t.Errorf("at most %d nodes were out of service at once; want 2 or 3 (--max-parallel 3, in parallel)", w.most)
	}
	for r, n := range w.perRack {
		if n > 1 {
			t.Errorf("rack %s had %d nodes out of service at once (--max-unavailable-per %s=1)", r, n, rack)
		}
	}
}

// One release and build configured otherwise is a kernel group of its own:
// kwok-node-0's kernel gets another config in place (a site's own build of
// the distribution kernel, same uname -r and -v). Its loader refuses a
// module built against the others' config, so it builds its own; the rest
// of its release still share one build. (A plan cannot tell: it reads
// the records of earlier probes, and groups by release.)
func TestAKernelConfiguredOtherwiseGetsItsOwnBuild(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	const odd, version = "kwok-node-0", "2.10.0" // a version no earlier test built: no cache
	if err := fakehost.SetKernelConfig(tttest.HostRoot(t, odd), "CONFIG_RANDSTRUCT_FULL=y"); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", nodes(rolled), "--max-parallel", "3"); code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	loaded := map[string]string{} // node → SHA-256 of the module it loads
	for i := range rolled {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, fmt.Sprintf("kwok-node-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			After  string `json:"after"`
			Module string `json:"module"`
		}
		if err := json.Unmarshal([]byte(n.Annotations[tt.AnnKMDResult]), &rec); err != nil || rec.After != version || rec.Module == "" {
			t.Fatalf("node %s: result %q", n.Name, n.Annotations[tt.AnnKMDResult])
		}
		if n.Spec.Unschedulable {
			t.Errorf("node %s is still cordoned", n.Name)
		}
		if o := tttest.Host(t, n.Name); o.LoadedKMD != version {
			t.Errorf("node %s loads %q", n.Name, o.LoadedKMD)
		}
		loaded[n.Name] = rec.Module
	}
	// Node i runs kernels[i%2]: 0, 2, 4 one release, node 0 configured otherwise.
	if loaded["kwok-node-2"] != loaded["kwok-node-4"] || loaded["kwok-node-1"] != loaded["kwok-node-3"] ||
		loaded["kwok-node-3"] != loaded["kwok-node-5"] {
		t.Errorf("nodes of one kernel group load different modules: %v", loaded)
	}
	if loaded[odd] == loaded["kwok-node-2"] {
		t.Errorf("%s loads the module of the other config: %v", odd, loaded)
	}
	cms, err := c.Client.CoreV1().ConfigMaps(deploy.HelperNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: tt.LabelSharedModule + "=" + version})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 3 {
		t.Errorf("%d shared modules published, want 3: two releases, one of them configured twice", len(cms.Items))
	}
}
