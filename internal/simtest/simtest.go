// Package simtest runs one simulated cluster (the sim/ binary) per test
// package. A package's TestMain calls Main; tests then call Get for a
// clientset and rest.Config, and NewNamespace for an isolated namespace.
//
// The sim binary is taken from $ROLLBOOK_SIM_BIN when set (make test builds
// it once), else built into .cache/bin/sim by hack/build-sim.sh under a file
// lock, so packages tested in parallel build it once.
package simtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollbook/rollbook/deploy"
)

// Options choose the cluster a test package gets.
type Options struct {
	Nodes    int    // fake nodes; default 3
	Scenario string // sim scenario; default "empty"
	// ExtraArgs are passed to `sim up` as they are.
	ExtraArgs []string
	// Env is added to the sim's environment only (and so its control
	// plane's), not to the test process that runs the tool.
	Env []string
}

// Cluster is the running sim of this test package.
type Cluster struct {
	Dir        string
	Kubeconfig string
	RESTConfig *rest.Config
	Client     kubernetes.Interface

	base string // holds Dir and the sim's output
	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	watched bool // a test checked violations
	seen    int  // violations lines read by the last check
}

var current *Cluster

// Get returns the package's cluster; it skips the test under -short and
// fails it when Main did not start one.
func Get(t testing.TB) *Cluster {
	t.Helper()
	if current == nil && short() {
		t.Skip(ShortReason)
	}
	if current == nil {
		t.Fatal("simtest: no cluster; call simtest.Main from TestMain")
	}
	return current
}

// Main starts the sim, runs the tests and always stops the sim: on return,
// on SIGINT/SIGTERM, and (through the sim's own parent watch and
// Pdeathsig) when the test binary dies from a panic or timeout. Under
// -short it starts none and the tests that need one skip.
func Main(m *testing.M, o Options) {
	os.Exit(run(m, o))
}

func run(m *testing.M, o Options) int {
	flag.Parse()
	if short() {
		return m.Run()
	}
	c, err := Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "simtest:", err)
		return 1
	}
	current = c
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		c.Stop()
		fmt.Fprintf(os.Stderr, "simtest: %v: sim stopped\n", s)
		os.Exit(1)
	}()
	defer c.Stop()
	code := m.Run()
	if err := c.checkLate(); err != nil {
		fmt.Fprintln(os.Stderr, "simtest:", err)
		if code == 0 {
			code = 1
		}
	}
	if code != 0 {
		// The sim's own story (its controllers' retries, its faults) is
		// the other half of a failure's cause; its directory is removed.
		fmt.Fprintf(os.Stderr, "simtest: the last %d lines of the sim's output:\n%s\n", simTailOnFailure,
			tail(filepath.Join(c.base, "sim.out"), simTailOnFailure))
	}
	return code
}

// Start builds (if needed) and starts a sim, returning once it is ready.
func Start(o Options) (*Cluster, error) {
	if short() {
		return nil, errShort
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Scenario == "" {
		o.Scenario = "empty"
	}
	bin, err := SimBinary()
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(o.Scenario, "tt-") {
		// The sim's helper runner executes helper pods with the real agent.
		agent, err := AgentBinary()
		if err != nil {
			return nil, err
		}
		o.ExtraArgs = append(o.ExtraArgs, "--tt-agent", agent)
		// The sim runs helpers from the node-agent image built from this
		// tree and pulls nothing else: the plugins under test name it by
		// digest, as a release's do (HelperImage).
		layout, ref, err := HelperImage()
		if err != nil {
			return nil, err
		}
		switch {
		case layout != "":
			o.ExtraArgs = append(o.ExtraArgs, "--tt-image", layout)
			_ = os.Setenv(envHelperImage, ref)
		case os.Getenv(envHelperImage) == "":
			// Helpers outside the image (a machine without root): the sim's
			// registry then holds the repository's tags.
			_ = os.Setenv(envHelperImage, "ghcr.io/rollbook/node-agent:latest")
		}
	}
	base, err := os.MkdirTemp("", "rollbook-sim-")
	if err != nil {
		return nil, err
	}
	// sim only takes an empty directory or one it made; its output goes beside it.
	dir := filepath.Join(base, "sim")
	args := append([]string{"up", "--dir", dir, "--nodes", fmt.Sprint(o.Nodes), "--scenario", o.Scenario, "--exit-with-parent"},
		o.ExtraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), o.Env...)
	out, err := os.Create(filepath.Join(base, "sim.out"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &Cluster{Dir: dir, base: base, Kubeconfig: filepath.Join(dir, "kubeconfig"), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()

	deadline := time.After(3 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("sim exited before it was ready:\n%s", tail(filepath.Join(base, "sim.out"), 40))
		case <-deadline:
			c.Stop()
			return nil, fmt.Errorf("sim not ready after 3m:\n%s", tail(filepath.Join(base, "sim.out"), 40))
		case <-time.After(50 * time.Millisecond):
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		c.Stop()
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.RESTConfig = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		c.Stop()
		return nil, err
	}
	if strings.HasPrefix(o.Scenario, "tt-") {
		if err := c.applyHelperPrerequisites(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// applyHelperPrerequisites does what a cluster admin does before the first
// kubectl tt run: the helper namespace and PriorityClass of deploy/ (the
// sim's tt scenarios apply them too; both are idempotent). The admission
// policy is left to the tests that prove it (test/e2e/rbac).
func (c *Cluster) applyHelperPrerequisites() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	for _, f := range []string{deploy.NamespaceFile, deploy.PriorityClassFile} {
		if err := deploy.Apply(ctx, dyn, f, nil); err != nil {
			return err
		}
	}
	return c.waitDefaultServiceAccount(ctx, deploy.HelperNamespace)
}

// Stop terminates the sim and removes its directory; safe to call twice.
func (c *Cluster) Stop() {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
	if os.Getenv("ROLLBOOK_KEEP_SIM") == "" {
		_ = os.RemoveAll(c.base)
	}
}

// Context returns a context for one test, cancelled when it ends.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// simTailOnFailure is how much of the sim's output a failed package prints.
const simTailOnFailure = 150

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
