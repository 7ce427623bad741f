//go:build e2e

// Package fwbundle runs kubectl tt upgrade firmware with bundles that do
// not fit the request or the node: each is read by the probe on the node
// and refused before the cordon (exit 3, both values and the fix named),
// where before the node was cordoned and drained first — and, for a
// bundle of another version, flashed with firmware nobody asked for.
package fwbundle

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "tt-fleet"}) }

// target runs n150 cards (sim/tthost pcieBoards) at 18.2.0.0.
const target = "kwok-node-0"

func bundleURL(t *testing.T, name string) string {
	return "file://" + filepath.Join(simtest.Get(t).Dir, "bundles", name)
}

func TestBundleIsReadBeforeTheCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	flash := func(version, url string, extra ...string) []string {
		return append([]string{"upgrade", "firmware", "--nodes", target, "--version", version, "--bundle-url", url}, extra...)
	}
	// --version 19.9.0 given the 19.0.0 bundle: every chip would be
	// written with 19.0.0 and the run fail its readback, cordoned.
	tttest.BlockedUncordoned(t, ctx, target, []string{"is version 19.0.0.0", "--version 19.9.0 expects 19.9.0.0",
		"give the bundle of 19.9.0"}, flash("19.9.0", bundleURL(t, "fw_pack-19.0.0.fwbundle"))...)

	// A typo'd path.
	tttest.BlockedUncordoned(t, ctx, target, []string{"fw_pack-19.9.O.fwbundle cannot be used", "fix --bundle-url"},
		flash("19.9.0", bundleURL(t, "fw_pack-19.9.O.fwbundle"))...)

	// A bundle with no image for the node's n150 cards (tt-flash's
	// NEBULA_X1).
	noN150 := filepath.Join(c.Dir, "bundles", "fw_pack-19.9.0-blackhole.fwbundle")
	if err := fakehost.WriteBundleFor(noN150, "19.9.0", "n300", "p150"); err != nil {
		t.Fatal(err)
	}
	tttest.BlockedUncordoned(t, ctx, target, []string{"has no image for n150", "NEBULA_X1/image.bin", "it has NEBULA_X2, P150A-1"},
		flash("19.9.0", "file://"+noN150)...)

	// A bundle that is not the pinned one.
	pin := strings.Repeat("ab", 32)
	tttest.BlockedUncordoned(t, ctx, target, []string{"expected " + pin, "--bundle-sha256"},
		flash("19.9.0", bundleURL(t, "fw_pack-19.9.0.fwbundle"), "--bundle-sha256", pin)...)

	// The bundle that fits flashes.
	if out, code := tttest.Run(t, ctx, flash("19.9.0", bundleURL(t, "fw_pack-19.9.0.fwbundle"))...); code != cli.ExitOK {
		t.Fatalf("the right bundle: exit %d\n%s", code, out)
	}
	for i, fw := range tttest.Host(t, target).Firmware {
		if fw != "19.9.0.0" {
			t.Fatalf("device %d runs %s after the flash, want 19.9.0.0", i, fw)
		}
	}
	c.ExpectNoViolations(t)
}
