//go:build e2e

// Package kmdverify runs kubectl tt upgrade kmd against hosts where the new
// module is not what it seems once loaded: it binds fewer cards than the
// node has, or the device is held in ways /proc/PID/fd does not show
// (tt-kmd 2.10's dma-bufs and mappings after close()).
package kmdverify

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/tt"
)

// fleetKMD is what the tt-fleet scenario's hosts run and cache (sim/tthost);
// newKMD is a release the fake remote tags, built on the node.
const (
	fleetKMD = "2.7.0"
	newKMD   = "2.8.0"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "tt-fleet"}) }

var node, host, hostRoot, run = tttest.Node, tttest.Host, tttest.HostRoot, tttest.Run

func contains(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the output does not say %q", w)
		}
	}
}

// The new module loads but its probe of one card fails: the node fails,
// saying which card, the previous module is back and verified, and the
// node is given back (uncordoned, gates reopened) on it.
func TestUnboundCardRestoresPreviousModule(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-0"
	if err := fakehost.FailProbe(hostRoot(t, target), 0, newKMD); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, ctx, "upgrade", "kmd", "--version", newKMD, "--nodes", target)
	if code != cli.ExitFailed {
		t.Errorf("exit %d, want %d (failed)", code, cli.ExitFailed)
	}
	contains(t, out, "DevicesUnbound", "bound 1 of 2", "not bound: "+fakehost.BusID(0), "restored tt-kmd "+fleetKMD,
		"dmesg", "node uncordoned")
	if h := host(t, target); h.LoadedKMD != fleetKMD {
		t.Errorf("the host runs %q, want the restored %s", h.LoadedKMD, fleetKMD)
	}
	n := node(t, target)
	if n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] != "" || n.Annotations[tt.AnnGatesPrior] != "" ||
		n.Annotations[runbook.TimerKey(tt.KMDRunbookName)] != "" {
		t.Errorf("restored node: unschedulable %v, left-cordoned %q, gates prior %q", n.Spec.Unschedulable,
			n.Annotations[kube.AnnLeftCordoned], n.Annotations[tt.AnnGatesPrior])
	}
	if l := n.Labels[tt.LabelKMDVersion]; l != fleetKMD {
		t.Errorf("label %q, want the restored %s", l, fleetKMD)
	}
}

// The previous module does not serve the card again either: the restore is
// not verified, and the node stays cordoned saying so.
func TestUnboundCardRestoreFailsStaysCordoned(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-1"
	if err := fakehost.FailProbe(hostRoot(t, target), 1, newKMD, fleetKMD); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, ctx, "upgrade", "kmd", "--version", newKMD, "--nodes", target)
	if code != cli.ExitFailed {
		t.Errorf("exit %d, want %d (failed)", code, cli.ExitFailed)
	}
	contains(t, out, "bound 1 of 2", fakehost.BusID(1), "restoring tt-kmd "+fleetKMD+" failed")
	n := node(t, target)
	if !n.Spec.Unschedulable || !strings.Contains(n.Annotations[kube.AnnLeftCordoned], "restoring tt-kmd") {
		t.Errorf("unschedulable %v, left-cordoned %q: want cordoned with the reason", n.Spec.Unschedulable,
			n.Annotations[kube.AnnLeftCordoned])
	}
}

// A host process holds the device only through a mapping (its fd closed):
// the probe sees it and stops the node before its cordon; --force-unload
// kills it, and nothing blames the helper's hostPID.
func TestMmapHolderIsSeen(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target, pid = "kwok-node-2", 4242
	root := hostRoot(t, target)
	if err := fakehost.StartProcess(root, fakehost.Holder{PID: pid, Comm: "ttnn-bench", Via: fakehost.HoldMmap}); err != nil {
		t.Fatal(err)
	}
	untouched := c.NeverCordoned(t, ctx, target)
	out, code := run(t, ctx, "upgrade", "kmd", "--version", newKMD, "--nodes", target)
	if code != cli.ExitBlocked {
		t.Errorf("exit %d, want %d (blocked)", code, cli.ExitBlocked)
	}
	contains(t, out, "pid "+strconv.Itoa(pid)+" (ttnn-bench, through an mmap of the device)")
	if !untouched() {
		t.Error("the node was cordoned")
	}
	// --max-parallel: another test of this package leaves a node cordoned.
	out, code = run(t, ctx, "upgrade", "kmd", "--version", newKMD, "--nodes", target, "--force-unload", "--max-parallel", "3")
	if code != 0 {
		t.Errorf("--force-unload: exit %d", code)
	}
	if strings.Contains(out, "hostPID") {
		t.Error("the output blames the helper's hostPID")
	}
	if h := host(t, target); h.LoadedKMD != newKMD || slices.Contains(h.PIDs, pid) {
		t.Errorf("the host runs %q with pids %v (%d killed?)", h.LoadedKMD, h.PIDs, pid)
	}
	if n := node(t, target); n.Spec.Unschedulable {
		t.Error("the node stayed cordoned")
	}
}
