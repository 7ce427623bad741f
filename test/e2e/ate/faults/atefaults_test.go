//go:build e2e

// Package atefaults rolls a four-node ate-fleet (traffic on) whose
// apiserver sits behind the sim's fault proxy (`sim up --api-faults`).
// Each run either finishes or stops naming why with exit 1 or 3;
// re-running the same command finishes the roll, every node flipped
// exactly once by the substrate's record, and no actor lost.
package atefaults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/chaostest"
	"github.com/rollbook/rollbook/internal/simtest"
)

// Rate is the fraction of API requests that get a fault.
const Rate = "0.03"

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "ate-fleet", ExtraArgs: []string{"--api-faults", Rate}})
}

func TestRollThroughAPIFaults(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	proxied := chaostest.BypassFaults(t)
	ctx := simtest.Context(t, 12*time.Minute)
	bin, err := chaostest.BuildPlugin("kubectl-ate")
	if err != nil {
		t.Fatal(err)
	}
	before, err := chaostest.ReadFaultStats(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &chaostest.Plugin{Bin: bin, Kubeconfig: proxied}
	check := func() {
		chaostest.CordonsSaySo(t, ctx, c.Client)
		atetest.NoActorLost(t, ctx)
	}
	atetest.DeployAtelet(t, atetest.NewV)
	var stops []string
	stops = append(stops, chaostest.UntilDone(t, ctx, p, 10, check, atetest.CloneArgs...)...)
	stops = append(stops, chaostest.UntilDone(t, ctx, p, 10, check, "preflight")...)
	stops = append(stops, chaostest.UntilDone(t, ctx, p, 20, check, "roll", "next-node", "--all", "--wait")...)

	flips := map[string][]string{}
	f, err := os.Open(filepath.Join(c.Dir, "ate-flips.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		flips[m["node"]] = append(flips[m["node"]], m["from"]+"→"+m["to"])
	}
	for _, n := range []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3"} {
		if len(flips[n]) != 1 || flips[n][0] != atetest.OldV+"→"+atetest.NewV {
			t.Errorf("%s flipped %v; want exactly once %s→%s", n, flips[n], atetest.OldV, atetest.NewV)
		}
	}
	s := atetest.Status(t, ctx)
	if s.Counts[atetest.NewV] != 4 || s.OldPoolPodsRunning != 0 || s.ActorsOnOldPools != 0 {
		t.Errorf("after the roll: %s %v, %d old pods Running, %d actors on old workers", s.Phase, s.Counts, s.OldPoolPodsRunning,
			s.ActorsOnOldPools)
	}
	atetest.NoActorLost(t, ctx)
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	after, err := chaostest.ReadFaultStats(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	injected := after.Total() - before.Total()
	if injected == 0 {
		t.Fatalf("the proxy injected no fault in %d requests: the test proved nothing", after.Requests-before.Requests)
	}
	t.Logf("FIGURES ate faults: rate %s, %d requests, %d faults injected %v, %d run(s) stopped and were re-run: %v",
		Rate, after.Requests-before.Requests, injected, fmt.Sprint(after.Faults), len(stops), stops)
}
