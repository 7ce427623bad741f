//go:build e2e

// Package nodefaults rolls kmd on a three-node tt-fleet while one node goes
// NotReady right after rollbook cordoned it (the sim holds a node NotReady
// while it carries sim.rollbook.dev/not-ready=true, and its helper runner
// starts nothing there). The run must stop within seconds with exit 1 or 3
// naming the node, keep the cordon with its left-cordoned note, and the same
// command must finish once the node is Ready again.
package nodefaults

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/chaostest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

func TestMain(m *testing.M) {
	// A module load takes seconds on a real host. Without it the sim's swap
	// ends in ~100 ms, and a roll that cordons, drains and swaps faster than
	// the test marks the node down (a 50 ms poll plus a write) never meets
	// the NotReady node: the run exits 0 and the test fails by chance.
	_ = os.Setenv("ROLLBOOK_SIM_TT_LOAD_DELAY", "8s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "tt-fleet"})
}

var nodes = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"}

func TestKMDRollNodeGoesNotReady(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	bin, err := simtest.AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := &chaostest.Plugin{Bin: bin, Kubeconfig: c.Kubeconfig}
	const v = "2.8.0"
	args := []string{"upgrade", "kmd", "--version", v}

	// The first node rollbook cordons goes down at once.
	downed := chaostest.DownAfterCordon(t, ctx, c.Client)

	// A 15-minute helper budget must not be what ends the run: the wait
	// must notice the NotReady node within seconds.
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	r := p.Run(runCtx, chaostest.KillPoint{}, args...)
	cancel()
	down := <-downed
	if down == "" {
		t.Fatalf("no node was cordoned; run exited %d:\n%s", r.Code, r.Out)
	}
	t.Logf("%s went NotReady after its cordon; the run exited %d after %s", down, r.Code, r.Took.Round(time.Millisecond))
	if r.Code != 1 && r.Code != 3 {
		t.Fatalf("run exited %d after %s, want 1 or 3 naming %s:\n%s", r.Code, r.Took.Round(time.Second), down, r.Out)
	}
	if !strings.Contains(r.Out, down) || !strings.Contains(r.Out, "NotReady") {
		t.Errorf("the run's output does not name %s as NotReady:\n%s", down, r.Out)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, down, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] == "" {
		t.Errorf("%s: unschedulable %v, %s %q; want the cordon kept and said so", down, n.Spec.Unschedulable,
			kube.AnnLeftCordoned, n.Annotations[kube.AnnLeftCordoned])
	}
	t.Logf("%s left cordoned: %s", down, n.Annotations[kube.AnnLeftCordoned])
	chaostest.CordonsSaySo(t, ctx, c.Client)

	// The node comes back; the same command finishes the roll.
	chaostest.BackUp(t, ctx, c.Client, down)
	r2 := p.Run(ctx, chaostest.KillPoint{}, args...)
	if r2.Code != 0 {
		t.Fatalf("re-run after %s came back exited %d, want 0:\n%s", down, r2.Code, r2.Out)
	}
	for _, name := range nodes {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[tt.LabelKMDVersion] != v {
			t.Errorf("%s: kmd label %q, want %s", name, n.Labels[tt.LabelKMDVersion], v)
		}
	}
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	chaostest.NoHelperPodLeft(t, ctx, c.Client)
	t.Logf("FIGURES node NotReady mid-roll: stopped with exit %d after %s naming %s; re-run exit 0 after %s",
		r.Code, r.Took.Round(time.Millisecond), down, r2.Took.Round(time.Millisecond))
}
