//go:build e2e

// Package spifailure rolls firmware onto a board whose SPI write fails
// the way tt-flash hands to a person (both verifications fail: do not
// reset or power off, contact support). The fake tt-flash produces it
// (held to tt-flash's source by internal/fakehost's contract test) and the
// fake host reports any reset or flash of that board before the fix as a
// violation (failed-spi-touched). And onto a card whose new firmware does
// not start after the flash's reset: a power cycle, not a re-flash.
package spifailure

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
)

const (
	target = "kwok-node-0"
	other  = "kwok-node-1"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "tt-fleet"}) }

var node, host, hostRoot, run = tttest.Node, tttest.Host, tttest.HostRoot, tttest.Run

func bundle(t *testing.T, v string) string {
	return "file://" + filepath.Join(simtest.Get(t).Dir, "bundles", "fw_pack-"+v+".fwbundle")
}

func flash(t *testing.T, ctx context.Context, v string, extra ...string) (string, int) {
	return run(t, ctx, append([]string{"upgrade", "firmware", "--version", v, "--bundle-url", bundle(t, v), "--nodes", target},
		extra...)...)
}

// writes counts the SPI writes the fake tt-flash made on node.
func writes(t *testing.T, node string) int {
	ops, err := fakehost.Ops(hostRoot(t, node))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range ops {
		if o.Op == fakehost.OpFlash {
			n++
		}
	}
	return n
}

// A failed SPI write stops the roll for a person: the run exits 3 and
// records it on the node, which keeps its cordon; every later run (flash,
// kmd, tt-smi) refuses the node before anything changes until
// --acknowledge-failed-flash names it; status says what to do; nothing
// resets or flashes the board before the fix, even when the record was
// lost (the failed helper stops the flash step). After the fix, the
// acknowledged run flashes it and the record is gone.
func TestFailedSPIWriteStopsForAPerson(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	if err := fakehost.SetSPIVerifyFails(hostRoot(t, target), 1, true); err != nil {
		t.Fatal(err)
	}
	out, code := flash(t, ctx, "19.0.0")
	if code != cli.ExitBlocked || !strings.Contains(out, "needs a person") || !strings.Contains(out, "support") ||
		!strings.Contains(out, "--"+tt.AcknowledgeFlag+"="+target) {
		t.Fatalf("the failed SPI write: exit %d, want %d saying it needs a person", code, cli.ExitBlocked)
	}
	n := node(t, target)
	if _, ok := n.Annotations[tt.AnnFlashNeedsPerson]; !ok || !n.Spec.Unschedulable {
		t.Fatalf("after the failure: recorded %v, cordoned %v; want both", ok, n.Spec.Unschedulable)
	}
	h := host(t, target)
	if h.Firmware[0] != "18.2.0.0" || h.SPI[0] != "19.0.0.0" || h.SPI[1] != "18.2.0.0" {
		t.Fatalf("the fake did not set the situation up: running %v, SPI %v", h.Firmware, h.SPI)
	}
	wrote := writes(t, target)

	ack := "--" + tt.AcknowledgeFlag + "=" + target
	for _, again := range [][]string{
		{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0"), "--nodes", target},
		{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0")}, // the fleet, the node among it
		{"upgrade", "kmd", "--version", "2.9.1", "--nodes", target},
		{"upgrade", "smi", "--version", fakehost.ImageTTSMIVersion, "--nodes", target},
		{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0"), "--nodes", target + "," + other,
			"--" + tt.AcknowledgeFlag + "=" + other},
	} {
		out, code := run(t, ctx, again...)
		if code != cli.ExitBlocked || !strings.Contains(out, ack) || !strings.Contains(out, "19.0.0.0") {
			t.Fatalf("%v: exit %d, want %d naming the failed flash and %s", again, code, cli.ExitBlocked, ack)
		}
	}
	// An --in-cluster run is refused before its Job is made (where in-cluster
	// runs are set up: without the check, the Job would be).
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rbac/tt-operator.yaml", deploy.RunnerFile} {
		if err := deploy.Apply(ctx, dyn, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, code := flash(t, ctx, "19.0.0", "--in-cluster"); code != cli.ExitBlocked {
		t.Fatalf("--in-cluster: exit %d, want %d", code, cli.ExitBlocked)
	}
	if l, err := c.Client.BatchV1().Jobs(deploy.RunnerNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("a Job was made for a refused node: %v, %v", l, err)
	}
	// Acknowledging a node the run does not select is bad input.
	if _, code := flash(t, ctx, "19.0.0", "--"+tt.AcknowledgeFlag+"="+other); code != cli.ExitUsage {
		t.Fatalf("acknowledging an unselected node: exit %d, want %d", code, cli.ExitUsage)
	}
	if w := writes(t, target); w != wrote {
		t.Fatalf("a refused run wrote the SPI: %d writes, then %d", wrote, w)
	}
	if out, _ := run(t, ctx, "status", "--nodes", target); !strings.Contains(out, "needs a person") || !strings.Contains(out, ack) {
		t.Fatal("status does not show the node needing a person and the command")
	}
	if o := node(t, other); o.Spec.Unschedulable {
		t.Fatal("a refused run cordoned another node")
	}
	c.ExpectNoViolations(t)

	// The record lost (the run killed between the helper's failure and its
	// write, or the annotation removed): the failed flash helper still says
	// so, and any run that selects the node — a kmd run here — records it
	// again and refuses the node; status shows it again.
	patch := []byte(`{"metadata":{"annotations":{"` + tt.AnnFlashNeedsPerson + `":null}}}`)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.1", "--nodes", target); code != cli.ExitBlocked ||
		!strings.Contains(out, ack) {
		t.Fatalf("a kmd run with the record lost: exit %d, want %d naming %s", code, cli.ExitBlocked, ack)
	}
	if n := node(t, target); n.Annotations[tt.AnnFlashNeedsPerson] == "" || !strings.Contains(n.Annotations[tt.AnnFlashNeedsPerson], "19.0.0.0") {
		t.Fatalf("the lost record was not written again: %q", n.Annotations[tt.AnnFlashNeedsPerson])
	}
	if out, _ := run(t, ctx, "status", "--nodes", target); !strings.Contains(out, "needs a person") {
		t.Fatal("status does not show the node needing a person once its record is back")
	}
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// cleanup keeps the helper that is now the only record.
	if out, code := run(t, ctx, "cleanup", "--yes"); code != cli.ExitBlocked || !strings.Contains(out, "only record") {
		t.Fatalf("cleanup with the record lost: exit %d, want %d keeping the failed flash helper\n%s", code, cli.ExitBlocked, out)
	}
	if out, code := flash(t, ctx, "19.0.0"); code != cli.ExitBlocked || !strings.Contains(out, ack) {
		t.Fatalf("with the record lost: exit %d, want %d naming %s", code, cli.ExitBlocked, ack)
	}
	if w := writes(t, target); w != wrote {
		t.Fatalf("with the record lost, the run wrote the SPI: %d writes, then %d", wrote, w)
	}
	c.ExpectNoViolations(t)

	// Support fixed the board.
	if err := fakehost.SetSPIVerifyFails(hostRoot(t, target), 1, false); err != nil {
		t.Fatal(err)
	}
	if out, code := flash(t, ctx, "19.0.0", ack); code != cli.ExitOK {
		t.Fatalf("the acknowledged run: exit %d\n%s", code, out)
	}
	n = node(t, target)
	if _, ok := n.Annotations[tt.AnnFlashNeedsPerson]; ok || n.Spec.Unschedulable || n.Labels[tt.LabelFirmware] != "19.0.0.0" {
		t.Fatalf("after the acknowledged flash: record kept %v, cordoned %v, label %q", ok, n.Spec.Unschedulable,
			n.Labels[tt.LabelFirmware])
	}
	for i, fw := range host(t, target).Firmware {
		if fw != "19.0.0.0" {
			t.Fatalf("device %d runs %s after the acknowledged flash", i, fw)
		}
	}
	c.ExpectNoViolations(t)
}

// A card whose new firmware does not start: tt-flash wrote and verified
// its SPI, but after the reset it does not answer (tt-kmd keeps its device
// node; tt-smi cannot detect it; its sysfs attributes do not read). The
// run stops for a person (exit 3), naming the card and the cold boot, and
// the node keeps its cordon; a re-run before the power cycle writes
// nothing; after it, the same command finishes with no second write.
func TestACardSilentAfterTheFlashStopsForAPowerCycle(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	root := hostRoot(t, other)
	if err := fakehost.SetBootsSilent(root, 1, true); err != nil {
		t.Fatal(err)
	}
	args := []string{"upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle(t, "19.0.0"), "--nodes", other}
	out, code := run(t, ctx, args...)
	if code != cli.ExitBlocked || !strings.Contains(out, "device 1 ("+fakehost.BusID(1)+") does not answer") ||
		!strings.Contains(out, "Power the host off and on") {
		t.Fatalf("a card silent after the flash: exit %d, want %d naming the card and the power cycle", code, cli.ExitBlocked)
	}
	if n := node(t, other); !n.Spec.Unschedulable {
		t.Fatal("the node was given back with a card that does not answer")
	}
	if h := host(t, other); h.SPI[1] != "19.0.0.0" {
		t.Fatalf("the fake did not set the situation up: SPI %v", h.SPI)
	}
	wrote := writes(t, other)
	if _, code := run(t, ctx, args...); code != cli.ExitBlocked {
		t.Fatalf("re-run before the power cycle: exit %d, want %d", code, cli.ExitBlocked)
	}
	if w := writes(t, other); w != wrote {
		t.Fatalf("a re-run flashed a card that does not answer: %d writes, then %d", wrote, w)
	}
	// The power cycle: the card boots what its SPI holds.
	if err := fakehost.SetBootsSilent(root, 1, false); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, args...); code != cli.ExitOK {
		t.Fatalf("after the power cycle: exit %d\n%s", code, out)
	}
	if n := node(t, other); n.Spec.Unschedulable || n.Labels[tt.LabelFirmware] != "19.0.0.0" {
		t.Fatalf("after the power cycle: cordoned %v, label %q", n.Spec.Unschedulable, n.Labels[tt.LabelFirmware])
	}
	if w := writes(t, other); w != wrote {
		t.Fatalf("the card was flashed again after the power cycle: %d writes, then %d", wrote, w)
	}
	c.ExpectNoViolations(t)
}
