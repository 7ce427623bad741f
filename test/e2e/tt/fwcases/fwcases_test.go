//go:build e2e

// Package fwcases rolls firmware and tt-smi through the cases a real host
// gets into: a flash killed after it wrote the SPI and before its reset,
// minor and major downgrades (tt-flash's own rules), and a tt-smi label
// that disagrees with the host's binary. The contract fakes produce each
// situation; the plugin must measure it and converge.
package fwcases

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Node 3 of four is the sim's Galaxy; these tests use the PCIe nodes.
const (
	interruptedNode = "kwok-node-0"
	downgradeNode   = "kwok-node-1"
	smiNode         = "kwok-node-2"
	schemeNode      = "kwok-node-2" // tt-smi's test leaves its firmware alone
	galaxyNode      = "kwok-node-3"
	fleetSMI        = "5.0.0" // sim/tthost FleetHostTTSMI
	imageSMI        = fakehost.ImageTTSMIVersion
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet"}) }

var node, host, hostRoot, run = tttest.Node, tttest.Host, tttest.HostRoot, tttest.Run

func bundle(t *testing.T, v string) string {
	return "file://" + filepath.Join(simtest.Get(t).Dir, "bundles", "fw_pack-"+v+".fwbundle")
}

func flash(t *testing.T, ctx context.Context, n, v string, extra ...string) (string, int) {
	return run(t, ctx, append([]string{"upgrade", "firmware", "--version", v, "--bundle-url", bundle(t, v), "--nodes", n}, extra...)...)
}

// flashesPerChip counts the SPI writes the fake tt-flash made on each chip.
func flashesPerChip(t *testing.T, n string) map[int]int {
	ops, err := fakehost.Ops(hostRoot(t, n))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, o := range ops {
		if o.Op == fakehost.OpFlash {
			out[o.Chip]++
		}
	}
	return out
}

func wantRunning(t *testing.T, n, v string) {
	t.Helper()
	for i, fw := range host(t, n).Firmware {
		if fw != v {
			t.Fatalf("device %d of %s runs %s, want %s", i, n, fw, v)
		}
	}
}

// tt-flash killed between its SPI write and its reset: the SPI holds the
// bundle, the chips run the old image. The re-run converges by a reset and
// a readback — no second write, no --force-write.
func TestInterruptedFlashConvergesByReset(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	if err := fakehost.KillNextFlash(hostRoot(t, interruptedNode)); err != nil {
		t.Fatal(err)
	}
	out, code := flash(t, ctx, interruptedNode, "19.0.0")
	if code != cli.ExitFailed {
		t.Fatalf("the killed flash: exit %d, want %d", code, cli.ExitFailed)
	}
	h := host(t, interruptedNode)
	for i := range h.Firmware {
		if h.SPI[i] != "19.0.0.0" || h.Firmware[i] != "18.2.0.0" {
			t.Fatalf("the fake did not set the situation up: device %d SPI %s, running %s", i, h.SPI[i], h.Firmware[i])
		}
	}
	if !strings.Contains(out, "upgrade on 2 device(s)") {
		t.Error("the failure does not name the case (upgrade)")
	}
	out, code = flash(t, ctx, interruptedNode, "19.0.0")
	if code != cli.ExitOK || !strings.Contains(out, "after a reset loaded their SPI") {
		t.Fatalf("the re-run after a flash that reached the SPI: exit %d, want a reset-only pass", code)
	}
	wantRunning(t, interruptedNode, "19.0.0.0")
	for chip, n := range flashesPerChip(t, interruptedNode) {
		if n != 1 {
			t.Errorf("chip %d was written %d times; the SPI already held the bundle", chip, n)
		}
	}
	if n := node(t, interruptedNode); n.Spec.Unschedulable || n.Labels[tt.LabelFirmware] != "19.0.0.0" {
		t.Fatalf("after the re-run: unschedulable %v, label %q", n.Spec.Unschedulable, n.Labels[tt.LabelFirmware])
	}
	c.ExpectNoViolations(t)
}

// tt-flash writes nothing for a downgrade without --force, and refuses a
// major one without --allow-major-downgrades: the minor one converges, the
// major one stops at the probe (uncordoned, naming the case and the fix)
// until --allow-major-downgrade is given.
func TestFirmwareDowngrades(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	if _, code := flash(t, ctx, downgradeNode, "19.9.0"); code != cli.ExitOK {
		t.Fatalf("upgrade to 19.9.0: exit %d", code)
	}
	if _, code := flash(t, ctx, downgradeNode, "19.0.0"); code != cli.ExitOK {
		t.Fatalf("minor downgrade to 19.0.0: exit %d", code)
	}
	wantRunning(t, downgradeNode, "19.0.0.0")
	before := flashesPerChip(t, downgradeNode)
	out, code := flash(t, ctx, downgradeNode, "18.2.0")
	if code != cli.ExitBlocked || !strings.Contains(out, "major downgrade to 18.2.0.0") ||
		!strings.Contains(out, "--allow-major-downgrade") {
		t.Fatalf("major downgrade without the flag: exit %d, want %d naming the case and the flag", code, cli.ExitBlocked)
	}
	if node(t, downgradeNode).Spec.Unschedulable {
		t.Fatal("the refused node was cordoned")
	}
	if after := flashesPerChip(t, downgradeNode); len(after) != len(before) || after[0] != before[0] {
		t.Fatalf("the refused downgrade wrote the SPI: %v → %v", before, after)
	}
	wantRunning(t, downgradeNode, "19.0.0.0")
	if _, code := flash(t, ctx, downgradeNode, "18.2.0", "--allow-major-downgrade"); code != cli.ExitOK {
		t.Fatalf("major downgrade with --allow-major-downgrade: exit %d", code)
	}
	wantRunning(t, downgradeNode, "18.2.0.0")
	c.ExpectNoViolations(t)
}

// Firmware versions are compared as tt-flash compares them: the 80.x scheme
// before the renumbering at 18 is normalised (80.17 → 18 is a one-major
// upgrade tt-flash takes without flags), an upgrade across two majors and
// a Galaxy chip reporting 0xffffffff (no running version) are refused
// before the cordon until --force-write, which is what tt-flash wants.
func TestFirmwareVersionsAsTTFlashReadsThem(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	set := func(n string, chip int, v string) {
		t.Helper()
		if err := fakehost.SetFirmware(hostRoot(t, n), chip, v); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(n, v string, want ...string) {
		t.Helper()
		before := flashesPerChip(t, n)
		out, code := flash(t, ctx, n, v)
		if code != cli.ExitBlocked {
			t.Fatalf("%s to %s: exit %d, want %d (refused before the cordon)", n, v, code, cli.ExitBlocked)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s to %s: the refusal does not say %q", n, v, w)
			}
		}
		if node(t, n).Spec.Unschedulable {
			t.Fatalf("the refused node %s was cordoned", n)
		}
		if after := flashesPerChip(t, n); len(after) != len(before) {
			t.Fatalf("the refused flash wrote the SPI: %v → %v", before, after)
		}
	}

	set(schemeNode, -1, "80.17.2.0")
	if out, code := flash(t, ctx, schemeNode, "18.2.0"); code != cli.ExitOK {
		t.Fatalf("80.17.2.0 → 18.2.0 (one major up): exit %d\n%s", code, out)
	}
	wantRunning(t, schemeNode, "18.2.0.0")

	set(schemeNode, -1, "80.17.2.0")
	refused(schemeNode, "19.0.0", "upgrade across more than one major", "--force-write")
	if out, code := flash(t, ctx, schemeNode, "19.0.0", "--force-write"); code != cli.ExitOK {
		t.Fatalf("80.17.2.0 → 19.0.0 with --force-write: exit %d\n%s", code, out)
	}
	wantRunning(t, schemeNode, "19.0.0.0")

	set(galaxyNode, 1, "255.255.255.255")
	refused(galaxyNode, "19.0.0", "runs 255.255.255.255 (no running version)", "--force-write")
	if out, code := flash(t, ctx, galaxyNode, "19.0.0", "--force-write"); code != cli.ExitOK {
		t.Fatalf("a Galaxy chip at 0xffffffff with --force-write: exit %d\n%s", code, out)
	}
	wantRunning(t, galaxyNode, "19.0.0.0")
	c.ExpectNoViolations(t)
}

// tt-smi is measured on the host: a label at the target over another
// binary is work; the binary at the target without its label gets only
// the label.
func TestSMIMeasuredOnTheHost(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	setLabel := func(v *string) {
		t.Helper()
		val := "null"
		if v != nil {
			val = `"` + *v + `"`
		}
		patch := `{"metadata":{"labels":{"` + tt.LabelSMIVersion + `":` + val + `}}}`
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, smiNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	target := imageSMI
	setLabel(&target) // the label lies: the host runs fleetSMI
	if h := host(t, smiNode); h.HostTTSMI != fleetSMI {
		t.Fatalf("the host runs tt-smi %q, want %s", h.HostTTSMI, fleetSMI)
	}
	if _, code := run(t, ctx, "upgrade", "smi", "--version", imageSMI, "--nodes", smiNode); code != cli.ExitOK {
		t.Fatalf("exit %d", code)
	}
	if h := host(t, smiNode); h.HostTTSMI != imageSMI || !h.HostTTSMIRuns {
		t.Fatalf("the lying label was trusted: the host runs tt-smi %q (runs: %v)", h.HostTTSMI, h.HostTTSMIRuns)
	}
	setLabel(nil)
	out, code := run(t, ctx, "upgrade", "smi", "--version", imageSMI, "--nodes", smiNode)
	if code != cli.ExitOK || !strings.Contains(out, "only the label is written") {
		t.Fatalf("binary at the target, label missing: exit %d, want a label-only pass", code)
	}
	if n := node(t, smiNode); n.Labels[tt.LabelSMIVersion] != imageSMI || n.Spec.Unschedulable {
		t.Fatalf("label %q, unschedulable %v", n.Labels[tt.LabelSMIVersion], n.Spec.Unschedulable)
	}
	c.ExpectNoViolations(t)
}
