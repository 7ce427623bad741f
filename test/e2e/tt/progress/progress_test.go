//go:build e2e

// Package progress reads what a roll tells the person running it and the
// script waiting on it: the run's own output on a narrow terminal (k of N,
// an ETA, nothing past the edge) and status --wait's exit for each way a
// run ends.
package progress

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/ptytest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "tt-fleet"}) }

// A roll of three nodes on a 60-column terminal: the run's own output
// numbers each node (k of 3), gives an ETA and a rate once a node is done,
// and no line it draws, the redrawn status line included, passes column 60.
func TestRunProgressOnANarrowTerminal(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	term, err := ptytest.Open(60, 40)
	if err != nil {
		t.Fatalf("pseudo-terminal: %v", err)
	}
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: term.Tty, ErrOut: term.Tty}
	code := cli.ExecuteContext(ctx, ttcmd.NewRootCommand(streams),
		[]string{"upgrade", "kmd", "--version", "2.8.0", "--kubeconfig", c.Kubeconfig}, term.Tty)
	out := term.Close()
	lines := ptytest.Lines(out)
	t.Logf("kubectl tt upgrade kmd on a 60-column terminal → exit %d\n%s", code, strings.Join(lines, "\n"))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, l := range lines {
		if n := ptytest.Columns(l); n > 60 {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	for _, want := range []string{"(1 of 3)", "(2 of 3)", "(3 of 3)", "1 of 3 done · ETA ", "nodes/h"} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("the run's output lacks %q", want)
		}
	}
}

// leaseHeld waits until a run holds the tt Lease.
func leaseHeld(t *testing.T, ctx context.Context) {
	t.Helper()
	for {
		l, err := simtest.Get(t).Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no run took the lock")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// status --wait waits for the run in progress and exits 0 when it is done;
// with a --timeout shorter than the run it gives up with 1.
func TestStatusWaitDone(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	done := make(chan int, 1)
	go func() {
		_, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.1")
		done <- code
	}()
	leaseHeld(t, ctx)
	out, code := tttest.Run(t, ctx, "status", "--wait", "--timeout", "1s")
	if code != cli.ExitFailed || !strings.Contains(out, "timed out after 1s") {
		t.Errorf("--timeout 1s during a roll: exit %d, want 1 saying it timed out", code)
	}
	out, code = tttest.Run(t, ctx, "status", "--wait", "--timeout", "4m")
	if code != 0 {
		t.Errorf("status --wait after a roll that finished: exit %d, want 0", code)
	}
	for _, want := range []string{"of 3 done", "ended done: 3 of 3 done"} {
		if !strings.Contains(out, want) {
			t.Errorf("status --wait does not say %q", want)
		}
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("the roll: exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("status --wait returned, the roll did not end")
	}
}

// A roll interrupted half-way: status --wait exits 1 and says so.
func TestStatusWaitFailed(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	rollCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tttest.Run(t, rollCtx, "upgrade", "kmd", "--version", "2.8.0")
	}()
	// Interrupted as soon as the first node is cordoned.
	for cordoned := false; !cordoned; time.Sleep(50 * time.Millisecond) {
		l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range l.Items {
			cordoned = cordoned || n.Spec.Unschedulable
		}
	}
	stop()
	<-done
	out, code := tttest.Run(t, ctx, "status", "--wait", "--timeout", "1m")
	if code != cli.ExitFailed || !strings.Contains(out, "ended interrupted") {
		t.Errorf("status --wait after an interrupted roll: exit %d, want 1 saying it was interrupted", code)
	}
	// The same command finishes the roll; then --wait says done.
	if _, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.0"); code != 0 {
		t.Fatalf("re-run: exit %d", code)
	}
	if _, code := tttest.Run(t, ctx, "status", "--wait"); code != 0 {
		t.Errorf("status --wait after the re-run: exit %d, want 0", code)
	}
}

// A roll that stops for a person, blocked at a guard or paused: status
// --wait exits 3 and names it.
func TestStatusWaitBlocked(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	ns := c.NewNamespace(t)
	const n = "kwok-node-1"
	holders(t, ctx, ns, "precious", n)
	if _, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", n); code != cli.ExitBlocked {
		t.Fatalf("the roll over a PDB at zero: exit %d, want %d", code, cli.ExitBlocked)
	}
	out, code := tttest.Run(t, ctx, "status", "--wait", "--timeout", "1m")
	if code != cli.ExitBlocked || !strings.Contains(out, "ended blocked") {
		t.Errorf("status --wait after a blocked roll: exit %d, want 3 saying blocked", code)
	}
	if _, code := tttest.Run(t, ctx, "pause", "--reason", "change freeze"); code != 0 {
		t.Fatalf("pause: exit %d", code)
	}
	out, code = tttest.Run(t, ctx, "status", "--wait", "--timeout", "1m")
	if code != cli.ExitBlocked || !strings.Contains(out, "change freeze") || !strings.Contains(out, "kubectl tt resume") {
		t.Errorf("status --wait on a paused roll: exit %d, want 3 naming the pause and resume", code)
	}
	if _, code := tttest.Run(t, ctx, "resume"); code != 0 {
		t.Fatalf("resume: exit %d", code)
	}
}

func TestStatusWaitBadFlags(t *testing.T) {
	ctx := simtest.Context(t, time.Minute)
	for _, args := range [][]string{{"status", "--timeout", "1m"}, {"status", "--wait", "--watch"}, {"status", "--wait", "-o", "json"},
		{"status", "--wait", "--timeout", "-1s"}} {
		if out, code := tttest.Run(t, ctx, args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
}
