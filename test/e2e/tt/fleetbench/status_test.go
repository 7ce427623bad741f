//go:build e2e

package fleetbench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/simtest"
)

// statusRuns is how many times each command runs, interleaved; the best
// counts (the roll keeps both cores busy, so single runs are noise).
const statusRuns = 7

// midRoll is `kubectl tt status` timed against the floor (one metadata-only
// protobuf list of the nodes, hack/floor) while the roll is half done.
type midRoll struct {
	finished      int // nodes done when the first run started
	status, floor time.Duration
	err           error
}

func (m midRoll) String() string {
	if m.err != nil {
		return "not measured: " + m.err.Error()
	}
	return fmt.Sprintf("with %d of %d nodes done: `tt status` %s against the floor's %s: %.2f× (target ≤ 1.3×; best of %d each)",
		m.finished, nodes, m.status.Round(time.Millisecond), m.floor.Round(time.Millisecond), m.ratio(), statusRuns)
}

func (m midRoll) ratio() float64 { return m.status.Seconds() / m.floor.Seconds() }

// buildFloor builds hack/floor into dir.
func buildFloor(t *testing.T, dir string) string {
	t.Helper()
	root, err := simtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "floor")
	cmd := exec.Command("go", "build", "-o", bin, "./hack/floor")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building hack/floor: %v\n%s", err, out)
	}
	return bin
}

// measureStatus runs the floor and `kubectl tt status` statusRuns times
// each, one after the other, and keeps each one's best time. (Memory is
// hack/bench-status.sh's: a child's rusage here counts the test process's
// pages it shared until exec.)
func measureStatus(kubeconfig, floorBin, ttBin string, finished int) midRoll {
	m := midRoll{finished: finished}
	run := func(best *time.Duration, bin string, args ...string) error {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		if err != nil {
			return fmt.Errorf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
		}
		if *best == 0 || took < *best {
			*best = took
		}
		return nil
	}
	for range statusRuns {
		if err := run(&m.floor, floorBin); err != nil {
			m.err = err
			return m
		}
		if err := run(&m.status, ttBin, "status"); err != nil {
			m.err = err
			return m
		}
	}
	return m
}
