//go:build e2e

// Package window tests --window and --stop-at on the sim: a roll starts
// no node outside its maintenance window and pauses at the window's end
// with no node half-way.
package window

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet"}) }

var nodes = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3"}

// states says of each node whether the roll left it untouched (old
// version, not cordoned, no rollbook marks), done (new version,
// uncordoned) or half-way (anything else).
func states(t *testing.T, from, to string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range nodes {
		n := tttest.Node(t, name)
		cordoned := n.Spec.Unschedulable || kube.CordonStateOf(n).Owner != "" || n.Annotations[kube.AnnCordonedBy] != ""
		switch v := n.Labels[tt.LabelKMDVersion]; {
		case v == from && !cordoned:
			out[name] = "untouched"
		case v == to && !cordoned:
			out[name] = "done"
		default:
			out[name] = fmt.Sprintf("half-way (kmd %q, unschedulable %v, annotations %v)", v, n.Spec.Unschedulable, n.Annotations)
		}
	}
	return out
}

// Run outside its window the roll starts nothing and takes no lock; run
// so that the window closes after the first node started, it finishes
// that node, starts no other, and ends paused (exit 0) saying when the
// window opens again and what to run; re-run in an open window it goes on.
func TestWindowClosingMidRollLeavesNoNodeHalfWay(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	const from, to = "2.7.0", "2.8.1"
	roll := func(extra ...string) (string, int) {
		return tttest.Run(t, ctx, append([]string{"upgrade", "kmd", "--version", to, "--nodes", strings.Join(nodes, ",")}, extra...)...)
	}

	closed := simtest.DailyWindow(time.Now().Add(3 * time.Hour))
	out, code := roll("--window", closed)
	if code != 0 || !strings.Contains(out, "paused before starting: outside the maintenance window") ||
		!strings.Contains(out, "re-run then: kubectl tt upgrade kmd") {
		t.Fatalf("outside the window: exit %d, want 0 saying so and what to re-run", code)
	}
	for n, st := range states(t, from, from) {
		if st != "untouched" {
			t.Errorf("outside the window %s is %s", n, st)
		}
	}
	if l, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{}); err == nil &&
		l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		t.Errorf("outside the window the run took the lock: %s", *l.Spec.HolderIdentity)
	}

	// The window closes at a minute boundary; start the roll a few
	// seconds before it, so the first node starts inside it, and soak
	// after each node (a sim's node takes about a second) so the next
	// would start after it.
	end := simtest.SleepUntilWindowCloses(6 * time.Second)
	out, code = roll("--window", simtest.DailyWindow(end), "--soak", "10s")
	ended := time.Now()
	if code != 0 || !strings.Contains(out, "paused") || !strings.Contains(out, "re-run then: kubectl tt upgrade kmd") ||
		!strings.Contains(out, "it opens") {
		t.Errorf("the window closed mid-roll: exit %d, want 0 paused saying when it opens and what to re-run", code)
	}
	done, untouched := 0, 0
	for n, st := range states(t, from, to) {
		switch st {
		case "done":
			done++
		case "untouched":
			untouched++
		default:
			t.Errorf("after the window closed %s is %s", n, st)
		}
	}
	if done == 0 || untouched == 0 {
		t.Errorf("%d nodes done, %d untouched: want the window to close mid-roll (ended %s after it)", done, untouched,
			ended.Sub(end))
	}
	t.Logf("window closed at %s: %d node(s) done, %d untouched, the run ended %s after it", end.Format(time.TimeOnly), done,
		untouched, ended.Sub(end).Round(time.Second))

	// In a window open now the same command goes on: no pause to lift.
	out, code = roll("--window", simtest.DailyWindow(time.Now().Add(30*time.Minute)))
	if code != 0 {
		t.Fatalf("re-run in an open window: exit %d", code)
	}
	for n, st := range states(t, from, to) {
		if st != "done" {
			t.Errorf("after the re-run %s is %s", n, st)
		}
	}
	_ = out
}
