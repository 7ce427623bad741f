//go:build e2e

// Package quota keeps the clones' pods from being created (a
// ResourceQuota on the pool namespace, as a real cluster may have) and
// checks that the roll stops before its first flip, with the reason and
// the fix: those clones would serve nowhere once nodes flip.
package quota

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

func TestAQuotaThatRefusesTheClonesPodsStopsTheRollBeforeTheFirstFlip(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	const ns = "ate-workers"
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods: *resource.NewQuantity(int64(len(pods.Items)), resource.DecimalSI)}}}
	if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	clone := roll.CloneName("python-small", atetest.NewV)
	waitReplicaFailure(t, ctx, ns, clone)

	atetest.ExpectRefused(t, ctx, "every clone's Deployment can create its pods", "roll", "next-node")

	// Lifted, the clones come up and the roll may start; the rollback
	// leaves the cluster as it was.
	if err := c.Client.CoreV1().ResourceQuotas(ns).Delete(ctx, q.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	atetest.MustRun(t, ctx, "rollback")
	if s := atetest.Status(t, ctx); s.Phase != campaign.PhaseNotStarted {
		t.Fatalf("after the rollback: phase %s", s.Phase)
	}
}

// waitReplicaFailure watches the Deployment of pool until its controller
// says it cannot create the pods.
func waitReplicaFailure(t *testing.T, ctx context.Context, ns, pool string) {
	t.Helper()
	deps := simtest.Get(t).Client.AppsV1().Deployments(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = fleet.PoolLabel + "=" + pool
			return deps.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = fleet.PoolLabel + "=" + pool
			return deps.Watch(ctx, o)
		},
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err := watchtools.UntilWithSync(wctx, lw, &appsv1.Deployment{}, nil, func(e watch.Event) (bool, error) {
		d, ok := e.Object.(*appsv1.Deployment)
		if !ok {
			return false, nil
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the Deployment of %s/%s never said its pods were refused: %v", ns, pool, err)
	}
}

// TestAFullQuotaIsNamedAsQuota fills the pool namespace's quota once the
// clones' pods exist: the roll's pull probe is then refused with 403, as
// an RBAC denial is, and the refusal must name the quota (whose fix is the
// namespace owner's), not the ate-operator Role.
func TestAFullQuotaIsNamedAsQuota(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	const ns = "ate-workers"
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	clone := roll.CloneName("python-small", atetest.NewV)
	var pods *corev1.PodList
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel + "=" + clone})
		if err != nil || len(l.Items) == 0 {
			return false, nil
		}
		pods, err = c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the clone %s made no pod: %v", clone, err)
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods: *resource.NewQuantity(int64(len(pods.Items)), resource.DecimalSI)}}}
	c.CreateQuota(t, ctx, q)

	out := atetest.ExpectRefused(t, ctx, "a ResourceQuota in namespace "+ns+" refuses the pull probe", "roll", "next-node")
	if strings.Contains(out, "ate-operator Role") || strings.Contains(out, "deploy/rbac/") {
		t.Errorf("a quota's refusal was blamed on RBAC:\n%s", out)
	}
}
