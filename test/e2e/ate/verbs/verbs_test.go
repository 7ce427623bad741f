//go:build e2e

// Package verbs tests the recovery and takeover verbs of kubectl ate on a
// three-node ate-fleet, in file order: bad input on the untouched fleet,
// the GKE text, recover-node of a wrongly drained node, a canary roll
// paused by a failed soak, and a roll killed with SIGKILL and resumed.
package verbs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
)

// The eviction window is short so a worker pod deleted under an actor
// crashes it within the test.
func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

// gkeContext is the kube context gcloud would write for the sim.
const gkeContext = "gke_rollbook-test_us-central1-a_ate-sim"

// syncBuffer is a writer the test may read while a run writes to it.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed by the next write; nil until asked for
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// next returns what was written so far and a channel closed by the next
// write, so a test waits for output instead of polling it.
func (s *syncBuffer) next() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = make(chan struct{})
	}
	return s.b.String(), s.written
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runTo runs kubectl ate in process with kubeconfig, writing to out.
func runTo(t *testing.T, ctx context.Context, out *syncBuffer, kubeconfig string, args ...string) int {
	t.Helper()
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: out}
	return cli.ExecuteContext(ctx, atecmd.NewRootCommand(streams), append(args, "--kubeconfig", kubeconfig), out)
}

// runGKE runs kubectl ate through a kubeconfig whose context gcloud named.
func runGKE(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	var out syncBuffer
	code := runTo(t, ctx, &out, gkeKubeconfig(t), args...)
	t.Logf("kubectl ate %s (context %s) → exit %d\n%s", strings.Join(args, " "), gkeContext, code, out.String())
	return out.String(), code
}

// gkeKubeconfig copies the sim's kubeconfig with its context renamed the
// way gcloud names contexts.
func gkeKubeconfig(t *testing.T) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(simtest.Get(t).Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	delete(cfg.Contexts, cfg.CurrentContext)
	cfg.Contexts[gkeContext], cfg.CurrentContext = kctx, gkeContext
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubectlAte builds the plugin from this tree, for tests that kill it.
func kubectlAte(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ROLLBOOK_ATE_BIN"); p != "" {
		return p
	}
	root, err := simtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kubectl-ate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-ate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-ate: %v\n%s", err, out)
	}
	return bin
}

// settled reads the inventory after the simulated lists caught up (they
// leave out items that changed in the last half second).
func settled(t *testing.T, ctx context.Context, cl *ateapi.Client) *ateapi.Inventory {
	t.Helper()
	time.Sleep(time.Second) // the sim's list window: a duration of its world, not synchronisation
	inv, err := cl.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}
