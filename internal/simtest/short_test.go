package simtest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The package's own tests (cluster_test.go, built with the e2e tag) share
// one sim; under -short Main starts none, which TestShortStartsNoSim checks.
func TestMain(m *testing.M) { Main(m, Options{Nodes: 3}) }

// A -short run starts no sim: Main starts none, Get skips, Start and
// SimBinary refuse. Without -short the test runs itself again in a child
// test binary with -short, so every run of the package proves it.
func TestShortStartsNoSim(t *testing.T) {
	if !testing.Short() {
		out, err := exec.Command(os.Args[0], "-test.short", "-test.v", "-test.run", "^TestShortStartsNoSim$").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestShortStartsNoSim") {
			t.Fatalf("the same test under -short: %v\n%s", err, out)
		}
		return
	}
	if current != nil {
		t.Fatal("Main started a sim under -short")
	}
	if c, err := Start(Options{}); !errors.Is(err, errShort) {
		if c != nil {
			c.Stop()
		}
		t.Fatalf("Start under -short = %v, want the refusal", err)
	}
	if _, err := SimBinary(); !errors.Is(err, errShort) {
		t.Fatalf("SimBinary under -short = %v, want the refusal", err)
	}
	skipped := false
	t.Run("get", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Get(t)
	})
	if !skipped {
		t.Fatal("Get under -short did not skip the test")
	}
}
