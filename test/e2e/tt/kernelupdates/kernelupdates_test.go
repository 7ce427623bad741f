//go:build e2e

// Package kernelupdates rolls tt-kmd onto hosts with more than one kernel
// installed: the module is built and persisted for each kernel with
// headers, a reboot into one of them keeps the driver, and a reboot into a
// kernel installed after the roll is shown by status as needing work, with
// the command that fixes it.
package kernelupdates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "tt-fleet"}) }

var run, host, hostRoot, node = tttest.Run, tttest.Host, tttest.HostRoot, tttest.Node

const version = "2.8.1"

func persisted(t *testing.T, target, kernel string) bool {
	_, err := os.Stat(filepath.Join(hostRoot(t, target), "lib/modules", kernel, "updates/tenstorrent.ko"))
	return err == nil
}

func TestKernelUpdates(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	const target = "kwok-node-0"
	const next, bare, later = "6.8.0-50-generic", "6.8.0-51-generic", "6.8.0-60-generic"
	root := hostRoot(t, target)
	running := host(t, target).Kernel
	// An unattended upgrade installed two kernels before the roll, one
	// with its headers.
	for _, k := range []fakehost.InstalledKernel{{Release: next, Headers: true}, {Release: bare}} {
		if err := fakehost.InstallKernel(root, k); err != nil {
			t.Fatal(err)
		}
	}
	out, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", target)
	if code != 0 {
		t.Fatalf("roll: exit %d", code)
	}
	if !strings.Contains(out, bare+" have no headers") {
		t.Error("the roll does not list the kernel without headers")
	}
	for k, want := range map[string]bool{running: true, next: true, bare: false} {
		if persisted(t, target, k) != want {
			t.Errorf("kernel %s: persisted %v, want %v", k, !want, want)
		}
	}
	if out, _ := run(t, ctx, "status", "--nodes", target); strings.Contains(out, "needs work") {
		t.Error("status: needs work right after the roll")
	}

	// A boot into the other kernel: its persisted module loads.
	tttest.Reboot(t, ctx, target, next)
	if h := host(t, target); h.LoadedKMD != version {
		t.Fatalf("after the reboot into %s the host runs %q", next, h.LoadedKMD)
	}
	if out, _ := run(t, ctx, "status", "--nodes", target); strings.Contains(out, "needs work") {
		t.Error("status: needs work after a reboot into a kernel the module was built for")
	}

	// A kernel installed after the roll, then booted: no driver, a stale label.
	if err := fakehost.InstallKernel(root, fakehost.InstalledKernel{Release: later, Headers: true}); err != nil {
		t.Fatal(err)
	}
	tttest.Reboot(t, ctx, target, later)
	if h := host(t, target); h.LoadedKMD != "" {
		t.Fatalf("after the reboot into %s the host runs %q", later, h.LoadedKMD)
	}
	fix := "kubectl tt upgrade kmd --version " + version + " --nodes " + target
	out, code = run(t, ctx, "status", "--nodes", target)
	if code != 0 || !strings.Contains(out, "needs work") || !strings.Contains(out, "runs kernel "+later) || !strings.Contains(out, fix) {
		t.Fatalf("status after the reboot into %s: exit %d; want needs work, the kernel and %q", later, code, fix)
	}
	if _, code := run(t, ctx, strings.Fields(fix)[2:]...); code != 0 {
		t.Fatalf("the fix: exit %d", code)
	}
	if h := host(t, target); h.LoadedKMD != version || !persisted(t, target, later) {
		t.Fatalf("after the fix the host runs %q (persisted for %s: %v)", h.LoadedKMD, later, persisted(t, target, later))
	}
	if out, _ := run(t, ctx, "status", "--nodes", target); strings.Contains(out, "needs work") {
		t.Error("status: needs work after the fix")
	}
	if n := node(t, target); n.Spec.Unschedulable {
		t.Error("left cordoned")
	}
}

// An installed kernel whose headers name a compiler the host lacks would
// come back without tt-kmd after a boot into it: refused before the cordon.
func TestOtherKernelsCompilerMissingStopsBeforeCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	const target, other = "kwok-node-1", "6.12.0-1-amd64"
	if err := fakehost.InstallKernel(hostRoot(t, target), fakehost.InstalledKernel{Release: other, Headers: true, CC: "gcc-14"}); err != nil {
		t.Fatal(err)
	}
	before := host(t, target).LoadedKMD
	untouched := c.NeverCordoned(t, ctx, target)
	out, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", target)
	if code != cli.ExitBlocked || !strings.Contains(out, "installed kernel "+other+" has headers but tt-kmd "+version+" cannot be built") ||
		!strings.Contains(out, "gcc-14") {
		t.Fatalf("exit %d; want blocked, naming %s and gcc-14", code, other)
	}
	if !untouched() || host(t, target).LoadedKMD != before {
		t.Fatal("the node was cordoned or its module changed")
	}
	if err := os.WriteFile(filepath.Join(hostRoot(t, target), "usr/bin/gcc-14"), []byte("#!fake host toolchain\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", target); code != 0 {
		t.Fatalf("with gcc-14: exit %d", code)
	}
	if !persisted(t, target, other) {
		t.Errorf("not persisted for %s", other)
	}
}

// A kernel installed after the roll, not yet booted: the same command run
// again builds and persists tt-kmd for it without a cordon and without
// touching the loaded module, so the next boot comes back with the driver.
func TestAKernelInstalledAfterTheRollIsBuiltWithoutACordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	const target, later = "kwok-node-1", "6.8.0-70-generic"
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", target); code != 0 {
		t.Fatalf("the roll: exit %d", code)
	}
	root := hostRoot(t, target)
	if err := fakehost.InstallKernel(root, fakehost.InstalledKernel{Release: later, Headers: true}); err != nil {
		t.Fatal(err)
	}
	ops, _ := fakehost.Ops(root)
	untouched := c.NeverCordoned(t, ctx, target)
	out, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", target)
	if code != 0 {
		t.Fatalf("the re-run: exit %d", code)
	}
	if !persisted(t, target, later) {
		t.Fatalf("tt-kmd %s was not persisted for %s, installed after the roll:\n%s", version, later, out)
	}
	if !untouched() {
		t.Error("the node was cordoned to persist for a kernel it does not run")
	}
	if after, _ := fakehost.Ops(root); len(after) != len(ops) {
		t.Errorf("the loaded module changed: %v", after[len(ops):])
	}
	if h := host(t, target); h.LoadedKMD != version {
		t.Errorf("the host runs %q", h.LoadedKMD)
	}
	// Nothing left to do: a third run only measures.
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", target); code != 0 {
		t.Errorf("the third run: exit %d", code)
	}
	tttest.Reboot(t, ctx, target, later)
	if h := host(t, target); h.LoadedKMD != version {
		t.Fatalf("after the reboot into %s the host runs %q", later, h.LoadedKMD)
	}
}
