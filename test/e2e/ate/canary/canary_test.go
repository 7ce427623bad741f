//go:build e2e

// Package canary rolls the first node of a two-node ate-fleet while the new
// pools cannot schedule anywhere: the canary must not count as moved until
// a NEW worker serves on it, or the roll would go on with NEW serving nowhere.
package canary

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/kube"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_ATE_TRAFFIC", "off")
	simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet"})
}

// clones are the new pools clone-pools made.
func clones(t *testing.T, ctx context.Context, dyn dynamic.Interface) []unstructured.Unstructured {
	t.Helper()
	pools, err := dyn.Resource(fleet.WorkerPoolGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []unstructured.Unstructured
	for _, p := range pools.Items {
		if strings.HasSuffix(p.GetName(), "-v0-3-0") {
			out = append(out, p)
		}
	}
	return out
}

func patchPool(t *testing.T, ctx context.Context, dyn dynamic.Interface, p unstructured.Unstructured, patch string) {
	t.Helper()
	if _, err := dyn.Resource(fleet.WorkerPoolGVR).Namespace(p.GetNamespace()).Patch(ctx, p.GetName(), types.MergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hostnameKey pinned to kwok-node-1: the clones fit a
// node once it is at NEW (the roll's fleet-wide template check passes), but
// not the canary, kwok-node-0, so the canary's verify is what must catch it.
const hostnameKey = "kubernetes.io/hostname"

// strandClones makes every new pool's pods unschedulable, as someone editing
// the clones could: scaled to zero with a selector no node matches, then
// back to their replicas, so no pod of the earlier template is left to
// schedule.
func strandClones(t *testing.T, ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface) int {
	t.Helper()
	cl := clones(t, ctx, dyn)
	for _, p := range cl {
		patchPool(t, ctx, dyn, p, `{"spec":{"replicas":0,"template":{"nodeSelector":{"`+hostnameKey+`":"kwok-node-1"}}}}`)
	}
	for _, p := range cl {
		// At 0 replicas no pod of the pool is created any more: watch every
		// one listed now until it is gone.
		pods, err := cs.CoreV1().Pods(p.GetNamespace()).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, pod := range pods.Items {
			if !strings.HasPrefix(pod.Name, p.GetName()+"-") {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := kube.WaitForPodGone(wctx, cs, pod.Namespace, pod.Name)
			cancel()
			if err != nil {
				t.Fatalf("pool %s/%s at 0 replicas: pod %s: %v", p.GetNamespace(), p.GetName(), pod.Name, err)
			}
		}
		replicas, _, _ := unstructured.NestedInt64(p.Object, "spec", "replicas")
		patchPool(t, ctx, dyn, p, fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	}
	return len(cl)
}

func TestCanaryWaitsForANewWorkerHere(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	if n := strandClones(t, ctx, c.Client, dyn); n == 0 {
		t.Fatal("no new pool to make unschedulable: the test proves nothing")
	}
	out, code := atetest.Run(t, ctx, "roll", "next-node", "--verify-timeout", "5s")
	if code == 0 || !strings.Contains(out, "so one must come up here") {
		t.Fatalf("the canary passed verify with no NEW worker anywhere (exit %d)", code)
	}
	if got := atetest.NodeLabels(t, ctx)["kwok-node-1"]; got == atetest.NewV {
		t.Fatal("the roll went on to kwok-node-1 with NEW serving nowhere")
	}
	if s := atetest.Status(t, ctx); len(s.Nodes) != 1 || s.Nodes[0].Node != "kwok-node-0" ||
		!strings.Contains(s.Nodes[0].Step, "ate.node.verify") {
		t.Fatalf("status must show the canary as not yet verified: %+v", s.Nodes)
	}
	// Once the new pools can schedule, the same command finishes the canary.
	for _, p := range clones(t, ctx, dyn) {
		patchPool(t, ctx, dyn, p, `{"spec":{"template":{"nodeSelector":{"`+hostnameKey+`":null}}}}`)
	}
	atetest.MustRun(t, ctx, "roll", "next-node", "--verify-timeout", "2m")
	labels := atetest.NodeLabels(t, ctx)
	if labels["kwok-node-0"] != atetest.NewV || labels["kwok-node-1"] == atetest.NewV {
		t.Fatalf("after the re-run: %v; want only the canary at %s", labels, atetest.NewV)
	}
	atetest.NoActorLost(t, ctx)
}
