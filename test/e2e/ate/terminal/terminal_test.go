//go:build e2e

// Package terminal leaves a terminal (Failed) pod object of an old pool on a
// flipped node, as a kubelet eviction or a graceful node shutdown does, and
// checks that it does not make the node half-moved: the roll finishes, status
// shows nothing in progress, and no invariant is violated.
package terminal

import (
	"context"
	"encoding/json"
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
	"github.com/rollbook/rollbook/pkg/ui"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

// evictedLabel makes the sim's kubelet evict a pod (sim/cluster/stages/pod-evicted.yaml).
const evictedLabel = "sim.rollbook.dev/evicted"

// oldPoolPods are the pods on node of pools pinned to OldV, not terminal.
func oldPoolPods(t *testing.T, ctx context.Context, node string) []corev1.Pod {
	t.Helper()
	l, err := simtest.Get(t).Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.Spec.NodeSelector[fleet.VersionLabel] == atetest.OldV && p.Labels[fleet.PoolLabel] != "" &&
			p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func TestEvictedOldPoolPodOnAFlippedNode(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// A roll of the first node, interrupted as soon as its label flips:
	// its old-pool pods are still there, empty.
	flipped := atetest.RollUntilFlipped(t, ctx)
	pods := oldPoolPods(t, ctx, flipped)
	if len(pods) == 0 {
		t.Fatalf("the interrupted roll left no old-pool pod on %s to evict", flipped)
	}
	// The kubelet evicts one of them: a Failed pod object stays behind.
	victim := pods[0]
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{evictedLabel: "true"}}})
	if _, err := c.Client.CoreV1().Pods(victim.Namespace).Patch(ctx, victim.Name, types.MergePatchType, patch,
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		p, err := c.Client.CoreV1().Pods(victim.Namespace).Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not evicted: %s", victim.Namespace, victim.Name, p.Status.Phase)
		}
	}

	// Status and the roll see the node half-way (it is not moved yet) and
	// finish it; the Failed pod does not keep it half-way after that.
	if s := atetest.Status(t, ctx); len(s.Nodes) != 1 || s.Nodes[0].Node != flipped {
		t.Fatalf("status after the interrupt: in progress %+v, want %s", s.Nodes, flipped)
	}
	out := atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	if strings.Count(out, "node "+flipped+":") > 1 {
		t.Errorf("the roll took %s more than once", flipped)
	}
	atetest.AllAt(t, ctx, atetest.NewV, "after --all")
	s := atetest.Status(t, ctx)
	if len(s.Nodes) != 0 || s.Phase != campaign.PhaseRolled && s.Phase != campaign.PhaseRetireable {
		t.Fatalf("after the roll: phase %s, in progress %+v", s.Phase, s.Nodes)
	}
	if out := atetest.MustRun(t, ctx, "roll", "next-node"); strings.Contains(out, "node "+flipped+":") {
		t.Errorf("a finished roll takes %s again", flipped)
	}
	// The evicted pod object is still there (the roll deletes live pods
	// only; the pod GC removes terminal ones): the node moved with it.
	if p, err := c.Client.CoreV1().Pods(victim.Namespace).Get(ctx, victim.Name, metav1.GetOptions{}); err != nil ||
		p.Status.Phase != corev1.PodFailed || p.Spec.NodeName != flipped {
		t.Errorf("the evicted pod %s/%s should still be a Failed object on %s: %v", victim.Namespace, victim.Name, flipped, err)
	}
	atetest.NoActorLost(t, ctx)
}

// After the roll every node is at NEW and no actor is on an old-pool worker:
// with the control API status says so; without it (--no-api, or an API that
// cannot be reached) it must not, in its text or its JSON.
func TestStatusWithoutTheAPIClaimsNothingAboutActors(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	if s := atetest.Status(t, ctx); s.Phase != campaign.PhaseRetireable || !s.ActorsRead {
		t.Fatalf("with the API: phase %s, actors read %v", s.Phase, s.ActorsRead)
	}
	for _, args := range [][]string{{"--no-api"}, {"--ate-endpoint", "127.0.0.1:1"}} {
		text, code := atetest.Run(t, ctx, append([]string{"status"}, args...)...)
		js, _ := atetest.Run(t, ctx, append([]string{"status", "-o", "json"}, args...)...)
		if code != 0 || strings.Contains(text, "no actor on an old-pool worker") || !strings.Contains(text, "unknown") ||
			strings.Contains(text, string(campaign.PhaseRetireable)) {
			t.Errorf("status %v (exit %d) claims what it did not read, or does not say it is unknown", args, code)
		}
		if !strings.Contains(js, `"actorsOnOldPoolWorkers": null`) || !strings.Contains(js, `"actorsRead": false`) {
			t.Errorf("status -o json %v: the actor counts must be null, actorsRead false", args)
		}
		// A typed document with the roll's last run beside the status.
		var doc struct {
			APIVersion, Kind string
			Run              struct {
				Progress *struct{ Run, Outcome string }
			}
		}
		if err := json.Unmarshal([]byte(js[:strings.LastIndex(js, "}")+1]), &doc); err != nil || doc.APIVersion != ui.APIVersion ||
			doc.Kind != "Status" || doc.Run.Progress == nil || doc.Run.Progress.Run == "" || doc.Run.Progress.Outcome != "done" {
			t.Errorf("status -o json %v: %+v (%v), want a Status with the last run's progress, done", args, doc, err)
		}
	}
}

// After the roll, ate status --wait exits 0 saying the last run ended done;
// paused, it exits 3 naming the pause and resume.
func TestStatusWaitAfterTheRoll(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	out, code := atetest.Run(t, ctx, "status", "--wait", "--timeout", "30s")
	if code != 0 || !strings.Contains(out, "ended done") {
		t.Errorf("status --wait after the roll: exit %d, want 0 saying it ended done\n%s", code, out)
	}
	atetest.MustRun(t, ctx, "pause", "--reason", "soak over the weekend")
	defer atetest.MustRun(t, ctx, "resume")
	out, code = atetest.Run(t, ctx, "status", "--wait", "--timeout", "30s")
	if code != cli.ExitBlocked || !strings.Contains(out, "soak over the weekend") || !strings.Contains(out, "kubectl ate resume") {
		t.Errorf("status --wait while paused: exit %d, want 3 naming the pause and resume\n%s", code, out)
	}
}
