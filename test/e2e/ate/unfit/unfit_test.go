//go:build e2e

// Package unfit keeps the clones' pods off every node the roll would flip —
// a NoSchedule taint added after the old pools' pods ran (they stay, the
// clones' new pods are refused by the real kube-scheduler), and a clone
// template for another architecture than the nodes' — and checks that the
// roll stops before its first flip, with the reason and the fix.
package unfit

import (
	"context"
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
	"github.com/rollbook/rollbook/pkg/ate/roll"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

const taintKey = "example.com/dedicated"

func TestAClonesPodsNoNodeAdmitsStopTheRollBeforeTheFirstFlip(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// A taint on every node, which no pool tolerates.
	nodes := atetest.NodeLabels(t, ctx)
	for n := range nodes {
		taint(t, ctx, n, `[{"key":"`+taintKey+`","value":"infra","effect":"NoSchedule"}]`)
	}
	out := atetest.ExpectRefused(t, ctx, "every clone's pods fit a node once it is at NEW", "roll", "next-node")
	if !strings.Contains(out, taintKey+"=infra:NoSchedule") || !strings.Contains(out, "kubectl taint node") {
		t.Fatal("the refusal names neither the taint nor the fix")
	}
	for n := range nodes {
		taint(t, ctx, n, `null`)
	}

	// A clone for another architecture: its template selects arm64, every
	// node is amd64.
	clone := roll.CloneName("python-small", atetest.NewV)
	patch := `{"spec":{"template":{"nodeSelector":{"kubernetes.io/arch":"arm64"}}}}`
	if _, err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers").Patch(ctx, clone, types.MergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTemplate(t, ctx, clone, "arm64")
	out = atetest.ExpectRefused(t, ctx, "every clone's pods fit a node once it is at NEW", "roll", "next-node")
	if !strings.Contains(out, "kubernetes.io/arch=arm64") || !strings.Contains(out, "kubernetes.io/arch=amd64") {
		t.Fatal("the refusal does not say the clone's architecture and the nodes'")
	}

	// The rollback leaves the cluster as it was.
	atetest.MustRun(t, ctx, "rollback")
	if s := atetest.Status(t, ctx); s.Phase != campaign.PhaseNotStarted {
		t.Fatalf("after the rollback: phase %s", s.Phase)
	}
}

func taint(t *testing.T, ctx context.Context, node, taints string) {
	t.Helper()
	if _, err := simtest.Get(t).Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
		[]byte(`{"spec":{"taints":`+taints+`}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitTemplate waits until the pool controller rendered the clone's
// Deployment with the arch selector.
func waitTemplate(t *testing.T, ctx context.Context, pool, arch string) {
	t.Helper()
	for {
		deps, err := simtest.Get(t).Client.AppsV1().Deployments("ate-workers").List(ctx,
			metav1.ListOptions{LabelSelector: fleet.PoolLabel + "=" + pool})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range deps.Items {
			if d.Spec.Template.Spec.NodeSelector[corev1.LabelArchStable] == arch {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the Deployment of %s never selected %s", pool, arch)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
