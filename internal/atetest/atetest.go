// Package atetest holds what the kubectl-ate e2e test packages share: run
// the command tree against the package's simulated cluster, read status,
// and assert that a refused command changed nothing.
package atetest

import (
	"context"
	"encoding/json"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
)

// The versions and images the ate-fleet scenarios roll.
const (
	OldV    = "v0.2.0"
	NewV    = "v0.3.0"
	ImageGV = "registry.example/ateom-gvisor:v0.3.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	ImageVM = "registry.example/ateom-microvm:v0.3.0@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// CloneArgs clone both sandbox classes of the fleet.
var CloneArgs = []string{"roll", "clone-pools", "--image", "gvisor=" + ImageGV, "--image", "microvm=" + ImageVM}

// Run runs kubectl ate with args and returns its output and exit code.
func Run(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	c := simtest.Get(t)
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	code := cli.ExecuteContext(ctx, atecmd.NewRootCommand(streams), append(args, "--kubeconfig", c.Kubeconfig), errOut)
	all := out.String() + errOut.String()
	t.Logf("kubectl ate %s → exit %d\n%s", strings.Join(args, " "), code, all)
	return all, code
}

// MustRun runs args and fails the test unless they exit 0.
func MustRun(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, code := Run(t, ctx, args...)
	if code != 0 {
		t.Fatalf("kubectl ate %s: exit %d", strings.Join(args, " "), code)
	}
	return out
}

// Status reads `kubectl ate status -o json`.
func Status(t *testing.T, ctx context.Context) campaign.Status {
	t.Helper()
	out, _ := Run(t, ctx, "status", "-o", "json")
	var s campaign.Status
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &s); err != nil {
		t.Fatalf("status json: %v", err)
	}
	return s
}

// Client dials the control API the way the plugin does.
func Client(t *testing.T, ctx context.Context) *ateapi.Client {
	t.Helper()
	cl, err := ateapi.Dial(ctx, ateapi.DialOptions{RESTConfig: simtest.Get(t).RESTConfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// DeployAtelet plays step 3: the NEW atelet DaemonSet.
func DeployAtelet(t *testing.T, version string) {
	t.Helper()
	sim, err := simtest.SimBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := simtest.Get(t)
	if out, err := exec.Command(sim, "ate-setup", "deploy-atelet", "--dir", c.Dir, "--version", version).CombinedOutput(); err != nil {
		t.Fatalf("deploy atelet: %v\n%s", err, out)
	}
}

// DeployAPIServer plays step 6's `deploy apiserver` (or its rollback): the
// sim's API server rolls to era, answering nothing for a while.
func DeployAPIServer(t *testing.T, era string) {
	t.Helper()
	sim, err := simtest.SimBinary()
	if err != nil {
		t.Error(err)
		return
	}
	c := simtest.Get(t)
	if out, err := exec.Command(sim, "ate-setup", "deploy-apiserver", "--dir", c.Dir, "--era", era).CombinedOutput(); err != nil {
		t.Errorf("deploy apiserver: %v\n%s", err, out) // may run off the test's goroutine: no Fatal
	}
}

// AllAt fails the test, naming every node that is not, unless every node
// is at version; when says after what ("after the roll").
func AllAt(t *testing.T, ctx context.Context, version, when string) {
	t.Helper()
	var off []string
	for n, v := range NodeLabels(t, ctx) {
		if v != version {
			off = append(off, n+" at "+v)
		}
	}
	if len(off) > 0 {
		sort.Strings(off)
		t.Fatalf("%s: want every node at %s: %s", when, version, strings.Join(off, ", "))
	}
}

// NodeLabels returns every node's version label.
func NodeLabels(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	l, err := simtest.Get(t).Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range l.Items {
		out[n.Name] = n.Labels[fleet.VersionLabel]
	}
	return out
}

// Draining lists the workers in DRAINING. The simulated API's lists leave
// out items that changed in the last half second, so it lets them settle.
func Draining(t *testing.T, ctx context.Context) map[string]bool {
	t.Helper()
	time.Sleep(time.Second)
	inv, err := Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, w := range inv.Workers {
		if w.State == ateapi.WorkerDraining {
			out[w.Name+" ("+w.PoolKey()+" on "+w.Node+")"] = true
		}
	}
	return out
}

// ExpectRefused runs args and asserts exit 3 with want in the output, and
// that no node label changed and no worker started draining.
func ExpectRefused(t *testing.T, ctx context.Context, want string, args ...string) string {
	t.Helper()
	labels, drains := NodeLabels(t, ctx), Draining(t, ctx)
	out, code := Run(t, ctx, args...)
	if code != cli.ExitBlocked || !strings.Contains(out, want) {
		t.Fatalf("%v: exit %d, want %d and %q in the output", args, code, cli.ExitBlocked, want)
	}
	if after := NodeLabels(t, ctx); !reflect.DeepEqual(after, labels) {
		t.Fatalf("%v was refused but changed node labels: %v → %v", args, labels, after)
	}
	for w := range Draining(t, ctx) {
		if !drains[w] { // workers of deleted pods leave the list when their eviction window ends
			t.Fatalf("%v was refused but drained worker %s", args, w)
		}
	}
	return out
}

// NoActorLost fails the test for every actor the substrate shows CRASHED.
func NoActorLost(t *testing.T, ctx context.Context) {
	t.Helper()
	inv, err := Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range inv.Actors {
		if a.State == ateapi.ActorCrashed {
			t.Errorf("actor %s/%s CRASHED: %s", a.Atespace, a.Name, a.CrashMessage)
		}
	}
}

// RollUntilFlipped runs `roll next-node` and interrupts it once a node's
// label flips; it returns that node.
func RollUntilFlipped(t *testing.T, ctx context.Context) string {
	t.Helper()
	c := simtest.Get(t)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var flipped string
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for e := range w.ResultChan() {
			if n, ok := e.Object.(*corev1.Node); ok && e.Type == watch.Modified && n.Labels[fleet.VersionLabel] == NewV &&
				n.Annotations[fleet.AnnVerifyPending] != "" {
				flipped = n.Name
				cancel()
				return
			}
		}
	}()
	Run(t, runCtx, "roll", "next-node", "--wait")
	cancel()
	<-done
	if flipped == "" {
		t.Fatal("no node flipped")
	}
	return flipped
}

// Dynamic is a dynamic client of the package's simulated cluster.
func Dynamic(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(simtest.Get(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
