//go:build e2e

package verbs

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

// `kubectl ate roll next-node --all --wait` killed with SIGKILL right after
// a node's label flipped (a closed laptop, a dropped SSH session) leaves
// the lock to a dead process; the same command, with no extra flag, takes
// it over at once, finishes the half-moved node and the rest, loses no
// actor and flips every node exactly once. Then, every node at NEW, status
// prints the "After the roll, on GKE" commands. Whether or not the canary
// test moved a node first, it sets up what it needs itself: the GKE node
// pool, NEW's atelet and the clones (both idempotent).
func TestKilledRollResumesWithNoFlag(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	inGKEPool(t, ctx)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	bin := kubectlAte(t)
	args := []string{"roll", "next-node", "--all", "--wait"}

	events := c.Client.CoreV1().Events(metav1.NamespaceAll)
	l, err := events.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := events.Watch(ctx, metav1.ListOptions{FieldSelector: "reason=SubstrateVersionFlipped", ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cmd := exec.Command(bin, append(args, "--kubeconfig", c.Kubeconfig)...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.ResultChan():
		_ = cmd.Process.Signal(syscall.SIGKILL)
	case <-time.After(4 * time.Minute):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		t.Fatalf("no node flipped:\n%s", out.String())
	}
	_ = cmd.Wait()
	t.Logf("killed run:\n%s", out.String())
	lease, err := c.Client.CoordinationV1().Leases(fleet.Namespace).Get(ctx, fleet.LockName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("the killed run should still hold the lock: %v", err)
	}

	start := time.Now()
	res := atetest.MustRun(t, ctx, args...)
	took := time.Since(start)
	if !strings.Contains(res, "took over from") {
		t.Fatalf("the resumed run must take the dead run's lock over by itself and say so")
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Labels[fleet.VersionLabel] != atetest.NewV || n.Spec.Unschedulable {
			t.Errorf("node %s: %s=%q, unschedulable %v", n.Name, fleet.VersionLabel, n.Labels[fleet.VersionLabel], n.Spec.Unschedulable)
		}
		flips, err := events.List(ctx, metav1.ListOptions{FieldSelector: "reason=SubstrateVersionFlipped,involvedObject.name=" + n.Name})
		if err != nil || len(flips.Items) != 1 {
			t.Errorf("node %s flipped %d times (%v); want once", n.Name, len(flips.Items), err)
		}
	}
	atetest.NoActorLost(t, ctx)
	s := atetest.Status(t, ctx)
	if s.OldPoolPodsRunning != 0 || s.ActorsOnOldPools != 0 {
		t.Errorf("after the resumed roll: %d old-pool pods Running, %d actors on old workers", s.OldPoolPodsRunning, s.ActorsOnOldPools)
	}
	t.Logf("the same command after kill -9 took the lock over and finished the roll in %s", took.Round(time.Millisecond))

	st, _ := runGKE(t, ctx, "status")
	for _, want := range []string{
		"After the roll, on GKE: node pool(s) ate-workers (3 node(s)) of cluster ate-sim in us-central1-a, project rollbook-test",
		"Only now that every node shows " + fleet.VersionLabel + "=" + atetest.NewV + ", and never earlier",
		"gcloud container node-pools update ate-workers --cluster ate-sim --zone us-central1-a --project rollbook-test " +
			"--node-labels=<every existing user label>," + fleet.VersionLabel + "=" + atetest.NewV,
		"gcloud container clusters update ate-sim --zone us-central1-a --project rollbook-test --node-pool ate-workers " +
			"--enable-autoscaling --min-nodes <min> --max-nodes <max>",
	} {
		if !strings.Contains(st, want) {
			t.Errorf("status lacks %q", want)
		}
	}
}
