//go:build e2e

// Package poolrelabel checks the runbook's third warning: a GKE node pool
// relabelled to NEW mid-roll flips every node in it at once, with no drain
// and no pacing. The roll sees nodes at NEW it never moved, stops naming
// the pool and how to put it back, and finishes once it is back.
package poolrelabel

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

const pool = "accel-pool"

func label(t *testing.T, ctx context.Context, node, key, value string) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"` + key + `":"` + value + `"}}}`)
	if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch,
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gcloudContext adds to the sim's kubeconfig a context named as gcloud
// names one (gke_PROJECT_LOCATION_CLUSTER), for the sim's cluster.
func gcloudContext(t *testing.T) string {
	t.Helper()
	path := simtest.Get(t).Kubeconfig
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const name = "gke_p1_us-central1-a_prod"
	cur := *cfg.Contexts[cfg.CurrentContext]
	cfg.Contexts[name] = &cur
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestARelabelledNodePoolStopsTheRoll(t *testing.T) {
	c := simtest.Get(t)
	// The test plays GKE applying a pool's label to its nodes in place: old
	// workers stay next to the new atelet until the label is back. The sim
	// records that skew; nothing else may be recorded.
	before, err := c.Violations()
	if err != nil {
		t.Fatal(err)
	}
	skew := c.ExpectViolation(t, "worker-next-to-other-atelet")
	defer func() {
		after, _ := c.Violations()
		for _, v := range after[len(before):] {
			if !strings.Contains(v, `"rule":"worker-next-to-other-atelet"`) {
				t.Errorf("sim invariant violated: %s", v)
			}
		}
		skew()
	}()
	ctx := simtest.Context(t, 10*time.Minute)
	for n := range atetest.NodeLabels(t, ctx) {
		label(t, ctx, n, fleet.GKENodePoolLabel, pool)
	}
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")

	// The pool's label updated before the roll ended: GKE writes it on every
	// node of the pool, those the roll has not moved included.
	var relabelled []string
	for n, v := range atetest.NodeLabels(t, ctx) {
		if v == atetest.OldV {
			relabelled = append(relabelled, n)
			label(t, ctx, n, fleet.VersionLabel, atetest.NewV)
		}
	}
	if len(relabelled) != 2 {
		t.Fatalf("nodes at %s after one move: %v, want 2", atetest.OldV, relabelled)
	}
	// The relabel's own skew, once the sim's grace has passed: recorded
	// while the label is NEW, whatever rollbook does.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		vs, _ := c.Violations()
		if strings.Contains(strings.Join(vs[len(before):], "\n"), `"rule":"worker-next-to-other-atelet"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sim recorded no skew for the relabelled nodes")
		}
	}
	out := atetest.ExpectRefused(t, ctx, "node pool "+pool+" was relabelled", "roll", "next-node")
	for _, want := range append(relabelled, "gcloud container node-pools update "+pool,
		fleet.VersionLabel+"="+atetest.OldV) {
		if !strings.Contains(out, want) {
			t.Errorf("the stop does not name %q", want)
		}
	}
	atetest.ExpectRefused(t, ctx, "node pool "+pool+" was relabelled", "roll", "next-node", "--all")
	// In a context gcloud named, the commands name the cluster and where
	// it is instead of $CLUSTER and $ZONE.
	gke := gcloudContext(t)
	where := "--cluster prod --zone us-central1-a --project p1"
	out = atetest.ExpectRefused(t, ctx, "node pool "+pool+" was relabelled", "roll", "next-node", "--context", gke)
	if !strings.Contains(out, "gcloud container node-pools update "+pool+" "+where) {
		t.Errorf("in context %s the stop does not name %q", gke, where)
	}
	if out, _ := atetest.Run(t, ctx, "status", "--context", gke); !strings.Contains(out, "node-pools update "+pool+" "+where) {
		t.Errorf("in context %s status does not name %q", gke, where)
	}
	if st := atetest.Status(t, ctx); !strings.Contains(st.Summary, "node pool "+pool+" was relabelled") ||
		!strings.Contains(st.Next, "gcloud container node-pools update "+pool) {
		t.Errorf("status after the relabel: %s / %s", st.Summary, st.Next)
	}

	// Put back as the stop says (GKE writes OLD on the nodes again); the
	// roll then moves them one at a time, each with its drain.
	for _, n := range relabelled {
		label(t, ctx, n, fleet.VersionLabel, atetest.OldV)
	}
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	atetest.AllAt(t, ctx, atetest.NewV, "after the roll")
	atetest.NoActorLost(t, ctx)
}
