//go:build e2e

// Package slowsuspend rolls a two-node era D fleet where every node hosts
// many actors and a suspend takes a while and answers only once the actor is
// SUSPENDED, as upstream's does (ROLLBOOK_SIM_ATE_SYNC_SUSPEND,
// ROLLBOOK_SIM_ATE_TRANSITION, ROLLBOOK_SIM_ATE_BUSY_ACTORS): at
// --max-concurrent-suspends 1 a node's actors cannot all be suspended within
// --suspend-timeout. The roll measures its own pace and stops as soon as the
// projection says so, instead of burning the budget; a later node is refused
// before it is touched, and the advised concurrency finishes both.
package slowsuspend

import (
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	atenode "github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/cli"
)

const (
	transition = 2 * time.Second
	budget     = "20s"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_TRAFFIC", "off")
	os.Setenv("ROLLBOOK_SIM_ATE_SYNC_SUSPEND", "on")
	os.Setenv("ROLLBOOK_SIM_ATE_TRANSITION", transition.String())
	os.Setenv("ROLLBOOK_SIM_ATE_WORKER_CAPACITY", "6")
	os.Setenv("ROLLBOOK_SIM_ATE_BUSY_ACTORS", "12")
	// Room on the first node for every clone's pods: with the default 4 the
	// scheduler's order could leave python-large's lineage no new worker,
	// and the second node (its actors need one) could never move.
	os.Setenv("ROLLBOOK_SIM_ATE_WORKER_SLOTS", "8")
	simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet-d"})
}

func TestSlowSuspendsStopEarlyAndRefuseTheNextNodeBeforeItsDrain(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	nodes := c.Client.CoreV1().Nodes()

	if out := atetest.MustRun(t, ctx, "roll", "next-node", "--dry-run"); !strings.Contains(out, "no suspend pace measured yet") {
		t.Error("the dry run does not say that without a measured pace nothing is checked before the drain")
	}

	// The first node: no pace known, so it is drained; its first suspend
	// measures the pace, and the run stops once the rest cannot fit.
	start := time.Now()
	out, code := atetest.Run(t, ctx, "roll", "next-node", "--suspend-timeout", budget, "--max-concurrent-suspends", "1")
	took := time.Since(start)
	if code != cli.ExitBlocked || !strings.Contains(out, "projected") || !strings.Contains(out, "--max-concurrent-suspends ") {
		t.Fatalf("roll with a suspend budget the node's actors cannot fit: exit %d, want %d naming the projection and the "+
			"concurrency that fits", code, cli.ExitBlocked)
	}
	if b, _ := time.ParseDuration(budget); took > b/2 {
		t.Errorf("the roll stopped %s after it started: it spent its %s suspend budget instead of stopping once the pace was known",
			took.Round(time.Second), budget)
	}
	var first string
	for n, v := range atetest.NodeLabels(t, ctx) {
		node, err := nodes.Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := node.Annotations[fleet.AnnMovingTo]; ok {
			first = n
			if v != atetest.OldV {
				t.Fatalf("node %s flipped to %s with actors left on it", n, v)
			}
			if p, ok := atenode.ParsePace(node.Annotations[atenode.AnnSuspendPace]); !ok || p.Mean < transition {
				t.Fatalf("node %s: suspend pace %q recorded, want at least %s per suspend", n, node.Annotations[atenode.AnnSuspendPace],
					transition)
			}
		}
	}
	if first == "" {
		t.Fatal("no node is half-way after the stop")
	}

	// The advised concurrency finishes it: the budget starts again, the
	// pace known from the first run.
	atetest.MustRun(t, ctx, "roll", "next-node", "--suspend-timeout", budget, "--max-concurrent-suspends", "8")
	if v := atetest.NodeLabels(t, ctx)[first]; v != atetest.NewV {
		t.Fatalf("node %s at %s after the second run", first, v)
	}

	// The second node: the pace is known, so it is refused before anything
	// on it changes, with the numbers and the concurrency that fits.
	if out := atetest.MustRun(t, ctx, "roll", "next-node", "--dry-run"); !strings.Contains(out, "suspends projected") {
		t.Error("the dry run does not show the projection from the measured pace")
	}
	// --wait: the first node's new workers may not have registered their
	// capacity yet (a loaded machine), and the capacity guard comes first.
	out = atetest.ExpectRefused(t, ctx, "would outlast --suspend-timeout", "roll", "next-node", "--wait", "--suspend-timeout", budget,
		"--max-concurrent-suspends", "1")
	for _, want := range []string{"actor(s) at the measured pace", "1 at a time", "budget 20s", "--max-concurrent-suspends "} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q", want)
		}
	}
	l, err := nodes.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Items {
		if _, ok := n.Annotations[fleet.AnnMovingTo]; ok {
			t.Fatalf("node %s marked as moving by a refused run", n.Name)
		}
	}
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait", "--suspend-timeout", budget, "--max-concurrent-suspends", "4")
	atetest.AllAt(t, ctx, atetest.NewV, "after the roll")
	atetest.NoActorLost(t, ctx)
}
