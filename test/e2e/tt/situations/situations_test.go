//go:build e2e

// Package situations runs kubectl tt against hosts the sim starts in an
// awkward situation of its own (sim/tthost situations): a kmd label that
// lies, a reboot into a new kernel, a host whose glibc is older than the
// helper image's tt-smi needs. The sim decides these from its model; the
// plugin must measure them.
package situations

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/apicount"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
)

// The situations' values, as sim/tthost defines them (the sim is a separate
// module; its constants are restated here).
const (
	fleetKMD     = "2.7.0"
	lyingKMD     = "2.9.1"
	rebootKernel = "6.8.0-49-generic"
	fleetSMI     = "5.0.0"
	imageSMI     = fakehost.ImageTTSMIVersion

	lyingNode    = "kwok-node-0"
	rebootedNode = "kwok-node-1"
	oldGlibcNode = "kwok-node-2"
	plainNode    = "kwok-node-3"
)

// The shared e2e helpers (internal/tttest).
var node, host = tttest.Node, tttest.Host

func TestMain(m *testing.M) {
	for k, v := range map[string]string{
		"ROLLBOOK_SIM_TT_LYING_KMD": lyingNode,
		"ROLLBOOK_SIM_TT_REBOOTED":  rebootedNode,
		"ROLLBOOK_SIM_TT_OLD_GLIBC": oldGlibcNode,
	} {
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
	simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet"})
}

// run runs kubectl tt against this package's simulated cluster.
var run = tttest.Run

// The sim labelled the node with a version its host does not run: status
// --probe shows label against measurement, and an upgrade to the label's
// version really installs it.
func TestLyingKMDLabelIsMeasured(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	if l, h := node(t, lyingNode).Labels[tt.LabelKMDVersion], host(t, lyingNode).LoadedKMD; l != lyingKMD || h != fleetKMD {
		t.Fatalf("the sim did not set the situation up: label %q, host %q", l, h)
	}
	out, code := run(t, ctx, "status", "--probe", lyingNode)
	if code != 0 || !strings.Contains(out, "kmd label "+lyingKMD+", measured "+fleetKMD) {
		t.Fatalf("status --probe does not show the lie; exit %d", code)
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", lyingKMD, "--nodes", lyingNode); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := host(t, lyingNode).LoadedKMD; got != lyingKMD {
		t.Fatalf("the host runs %q; the lying label was trusted", got)
	}
	if n := node(t, lyingNode); n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != lyingKMD {
		t.Fatalf("after the upgrade: unschedulable %v, label %q", n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion])
	}
	out, _ = run(t, ctx, "status", "--probe", lyingNode)
	if strings.Contains(out, "disagree") {
		t.Fatal("label and measurement still disagree after the upgrade")
	}
}

// The sim rebooted the host into a new kernel: its labels still say the
// fleet version, but nothing is loaded. Status says so; the same version's
// upgrade rebuilds for the new kernel instead of counting the node done.
func TestRebootedNodeIsRedone(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	if h := host(t, rebootedNode); h.Kernel != rebootKernel || h.LoadedKMD != "" ||
		node(t, rebootedNode).Labels[tt.LabelKMDVersion] != fleetKMD {
		t.Fatalf("the sim did not set the situation up: host %+v", h)
	}
	out, code := run(t, ctx, "status", "--probe", rebootedNode)
	if code != 0 || !strings.Contains(out, "kmd label "+fleetKMD+", measured unknown") {
		t.Fatalf("status --probe does not show the missing module; exit %d", code)
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", fleetKMD, "--nodes", rebootedNode); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if h := host(t, rebootedNode); h.LoadedKMD != fleetKMD || h.Kernel != rebootKernel {
		t.Fatalf("after the upgrade the host runs %q on %s", h.LoadedKMD, h.Kernel)
	}
	if n := node(t, rebootedNode); n.Spec.Unschedulable {
		t.Fatal("the node stayed cordoned")
	}
}

// The helper image's tt-smi needs a newer glibc than this host's OS has:
// the install must be checked with the host's libc, fail, and leave the
// host's working tt-smi and its label alone. A host with the right glibc
// gets it.
func TestSMINeedsTheHostsGlibc(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	out, code := run(t, ctx, "upgrade", "smi", "--version", imageSMI, "--nodes", oldGlibcNode)
	if code != cli.ExitFailed || !strings.Contains(out, "GLIBC_") {
		t.Fatalf("tt-smi built for a newer glibc: want a failure naming the glibc; exit %d", code)
	}
	if h := host(t, oldGlibcNode); h.HostTTSMI != fleetSMI || !h.HostTTSMIRuns {
		t.Fatalf("the host's tt-smi is now %q (runs on the host: %v); want %s untouched", h.HostTTSMI, h.HostTTSMIRuns, fleetSMI)
	}
	if l := node(t, oldGlibcNode).Labels[tt.LabelSMIVersion]; l != fleetSMI {
		t.Fatalf("tt-smi label %q, want %s", l, fleetSMI)
	}
	if _, code := run(t, ctx, "upgrade", "smi", "--version", imageSMI, "--nodes", plainNode); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if h := host(t, plainNode); h.HostTTSMI != imageSMI || !h.HostTTSMIRuns {
		t.Fatalf("the plain host's tt-smi is %q (runs: %v)", h.HostTTSMI, h.HostTTSMIRuns)
	}
}

// One rolled node's API requests for a firmware flash, by verb and
// resource. Measured on this sim: 62-66 (about 51-55 for the node, the rest
// per run), against 81 before (see ttcmd's TestKMDRequestsPerNode for what
// is left per node).
func TestFirmwareRequestsPerNode(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	rc, stop := apicount.Start()
	defer stop()
	start := time.Now()
	bundle := "file://" + filepath.Join(c.Dir, "bundles", "fw_pack-19.0.0.fwbundle")
	if _, code := run(t, ctx, "upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundle, "--nodes", plainNode); code != 0 {
		t.Fatalf("exit %d", code)
	}
	t.Logf("one-node firmware roll in %s: %s", time.Since(start).Round(time.Millisecond), rc.Breakdown())
	if testing.Verbose() {
		t.Logf("in order:\n%s", rc.Paths())
	}
	if got := rc.Total(); got > 72 {
		t.Errorf("a one-node firmware roll made %d API requests (limit 72): %s\n%s", got, rc.Breakdown(), rc.Paths())
	}
	for i, fw := range host(t, plainNode).Firmware {
		if fw != "19.0.0.0" {
			t.Fatalf("device %d runs %s after the flash", i, fw)
		}
	}
}
