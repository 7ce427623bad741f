//go:build e2e

// Package ttfaults rolls kmd on a four-node tt-fleet whose apiserver sits
// behind the sim's fault proxy (`sim up --api-faults`): 429 with
// Retry-After, 500, 503, dropped connections and slow responses. Each run
// either finishes or stops naming why with exit 1 or 3; re-running the
// same command finishes the roll, with every module loaded exactly once.
package ttfaults

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/chaostest"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Rate is the fraction of API requests that get a fault.
const Rate = "0.03"

func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet", ExtraArgs: []string{"--api-faults", Rate}})
}

var nodes = []string{"kwok-node-0", "kwok-node-1", "kwok-node-2", "kwok-node-3"}

func TestKMDRollThroughAPIFaults(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	proxied := chaostest.BypassFaults(t)
	ctx := simtest.Context(t, 10*time.Minute)
	bin, err := simtest.AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	before, err := chaostest.ReadFaultStats(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &chaostest.Plugin{Bin: bin, Kubeconfig: proxied}
	const v = "2.8.0"
	stops := chaostest.UntilDone(t, ctx, p, 15, func() { chaostest.CordonsSaySo(t, ctx, c.Client) }, "upgrade", "kmd", "--version", v)
	for _, n := range nodes {
		ops, err := chaostest.HostOps(c.Dir, n)
		if err != nil {
			t.Fatal(err)
		}
		loads := 0
		for _, o := range ops {
			if o.Op == fakehost.OpInsmod && o.Version == v {
				loads++
			}
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if loads != 1 || node.Labels[tt.LabelKMDVersion] != v {
			t.Errorf("%s: module %s loaded %d times, label %q; want once and %s", n, v, loads, node.Labels[tt.LabelKMDVersion], v)
		}
	}
	chaostest.NoNodeLeftCordoned(t, ctx, c.Client)
	chaostest.NoHelperPodLeft(t, ctx, c.Client)
	after, err := chaostest.ReadFaultStats(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	injected := after.Total() - before.Total()
	if injected == 0 {
		t.Fatalf("the proxy injected no fault in %d requests: the test proved nothing", after.Requests-before.Requests)
	}
	t.Logf("FIGURES tt faults: rate %s, %d requests, %d faults injected %v, %d run(s) stopped and were re-run: %v",
		Rate, after.Requests-before.Requests, injected, fmt.Sprint(after.Faults), len(stops), stops)
}
