//go:build e2e

// Package apiroll rolls the nodes of an era D ate-fleet while the control
// API itself is rolled to era C mid-run, as `deploy apiserver` does in the
// runbook's step 6 (or in its rollback, from the old checkout): the same run
// must go on with the new server's descriptors, where a field number means
// something else and ListWorkerActorAssignments is gone.
package apiroll

import (
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

const downtime = 4 * time.Second

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	os.Setenv("ROLLBOOK_SIM_ATE_API_ROLL_DOWNTIME", downtime.String())
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet-d"})
}

func TestRollAcrossAnAPIServerRoll(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	if s := atetest.Status(t, ctx); s.Capabilities == nil || s.Capabilities.Era != "D" {
		t.Fatalf("want an era D API, got %+v", s.Capabilities)
	}
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// The first flip rolls the API server; the flips after it (and its
	// downtime) are the run's work with the new era's descriptors.
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var rolledAt time.Time
	var flips []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := map[string]bool{}
		for e := range w.ResultChan() {
			n, ok := e.Object.(*corev1.Node)
			if !ok || e.Type != watch.Modified || n.Labels[fleet.VersionLabel] != atetest.NewV || seen[n.Name] {
				continue
			}
			seen[n.Name] = true
			mu.Lock()
			flips = append(flips, time.Now())
			first := len(flips) == 1
			mu.Unlock()
			if first {
				atetest.DeployAPIServer(t, "c")
				mu.Lock()
				rolledAt = time.Now()
				mu.Unlock()
			}
		}
	}()
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	w.Stop()
	<-done

	mu.Lock()
	after := 0
	for _, f := range flips {
		if !rolledAt.IsZero() && f.After(rolledAt.Add(downtime)) {
			after++
		}
	}
	mu.Unlock()
	if after == 0 {
		t.Fatalf("no node flipped after the API server rolled (flips %v, rolled at %v): the test did not cover the roll",
			flips, rolledAt)
	}
	s := atetest.Status(t, ctx)
	if s.Capabilities == nil || s.Capabilities.Era != "C" {
		t.Fatalf("after the API roll: want era C, got %+v", s.Capabilities)
	}
	if s.Counts[atetest.NewV] != 3 || s.ActorsOnOldPools != 0 {
		t.Fatalf("after the roll: %s %v, %d actor(s) on old pools", s.Phase, s.Counts, s.ActorsOnOldPools)
	}
	atetest.NoActorLost(t, ctx)
}
