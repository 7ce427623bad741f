//go:build e2e

package verbs

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
)

// gkePool is the GKE node pool the sim's nodes are put in.
const gkePool = "ate-workers"

// inGKEPool puts the sim's three nodes in GKE node pool gkePool, as GKE
// labels them. It is idempotent; every test that reads the GKE text calls it.
func inGKEPool(t *testing.T, ctx context.Context) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, campaign.GKENodePoolLabel, gkePool)
	for _, n := range []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"} {
		if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// On a cluster whose nodes carry GKE's node-pool label, preflight prints the
// runbook's "On GKE" commands filled in with the pool and the cluster and
// zone of the gcloud context, and warns about a pool node without the
// version label; status keeps the after-roll commands for later.
func TestGKEPreflightFillsInTheCommands(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	inGKEPool(t, ctx)
	// A node GKE created from a pool that lacks the version label.
	extra := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gke-ate-workers-extra",
		Labels: map[string]string{campaign.GKENodePoolLabel: gkePool}}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), extra.Name, metav1.DeleteOptions{}) }()

	// The unlabelled node also fails the label check (exit 3): before step 3
	// NEW is "", which once let an unlabelled node pass as "at NEW".
	out, code := runGKE(t, ctx, "preflight")
	if code != cli.ExitBlocked || !strings.Contains(out, "✗ every node carries "+fleet.VersionLabel+" (1 unlabelled)") {
		t.Errorf("preflight with an unlabelled node: exit %d, want %d and the label check failed", code, cli.ExitBlocked)
	}
	loc := "--zone us-central1-a --project rollbook-test"
	for _, want := range []string{
		"On GKE: node pool(s) ate-workers (4 node(s)) of cluster ate-sim in us-central1-a, project rollbook-test",
		"gcloud container node-pools describe ate-workers --cluster ate-sim " + loc + " --format='json(autoscaling)'",
		"gcloud container clusters update ate-sim " + loc + " --node-pool ate-workers --no-enable-autoscaling",
		"gcloud container node-pools update ate-workers --cluster ate-sim " + loc +
			" --node-labels=<every existing user label>,ate.dev/substrate-version=" + atetest.OldV,
		"gcloud container clusters update ate-sim " + loc + " --add-maintenance-exclusion-name=ate-roll",
		"! node pool ate-workers: 1 of 4 node(s) lack ate.dev/substrate-version (gke-ate-workers-extra)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("preflight lacks %q", want)
		}
	}
	if out, _ := runGKE(t, ctx, "status"); strings.Contains(out, "After the roll, on GKE") {
		t.Errorf("status printed the after-roll commands before any node moved")
	}
	// JSON output stays a single document.
	if out, _ := runGKE(t, ctx, "preflight", "-o", "json"); strings.Contains(out, "--project rollbook-test") {
		t.Errorf("preflight -o json mixed the GKE text into the document")
	}
}
