//go:build e2e

// Package gates checks that a fact a gate rests on is recorded when it
// becomes true, not re-derived from what drifts: once every node reached
// NEW, step 6 may have upgraded the control plane, and a node that joins
// later at OLD (an autoscaler, an auto-repair recreating a node from the
// pool's label) must not switch the rollback's "control plane first" off.
package gates

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet"}) }

// lateNode is a node kwok manages, created the way the sim creates its
// nodes, at the node pool's label: OLD.
func lateNode(name string) *corev1.Node {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"type": "kwok", fleet.VersionLabel: atetest.OldV},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Status: corev1.NodeStatus{Allocatable: res, Capacity: res,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo:  corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.37.2"}},
	}
}

func TestANodeJoiningAtOldKeepsTheControlPlaneFirst(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	if s := atetest.Status(t, ctx); s.Counts[atetest.NewV] != 2 {
		t.Fatalf("the roll should leave both nodes at %s: %v", atetest.NewV, s.Counts)
	}
	// The roll recorded the fact when it became true.
	ds, err := c.Client.AppsV1().DaemonSets(fleet.Namespace).Get(ctx, "atelet-v0-3-0", metav1.GetOptions{})
	if err != nil || ds.Annotations[fleet.AnnEveryNodeReached] == "" {
		t.Fatalf("every node reached %s, but the NEW atelet DaemonSet does not record it: %v %v", atetest.NewV, err, ds.Annotations)
	}

	// Step 6 runs; then the autoscaler adds a node from the pool's label.
	const late = "kwok-node-late"
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, lateNode(late), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), late, metav1.DeleteOptions{}) })
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, late, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%s never became Ready: %v", late, err)
	}
	s := atetest.Status(t, ctx)
	if s.Counts[atetest.OldV] != 1 || !strings.Contains(s.ControlPlane, "step 6 may have") {
		t.Fatalf("status with a late node at OLD: counts %v, control plane %q", s.Counts, s.ControlPlane)
	}

	// Not every node is at NEW any more, but step 6 may have run: the
	// rollback still moves no node until told the OLD API server is back.
	out := atetest.ExpectRefused(t, ctx, "deploy apiserver", "rollback")
	if !strings.Contains(out, "joined or moved back since") {
		t.Errorf("the refusal should say the fact was recorded before the late node joined")
	}
	atetest.ExpectRefused(t, ctx, "--control-plane-reverted", "rollback", "next-node")

	// Told, it moves the nodes back, and a re-run needs no flag.
	atetest.MustRun(t, ctx, "rollback", "next-node", "--control-plane-reverted", "--wait")
	atetest.MustRun(t, ctx, "rollback", "--wait")
	atetest.AllAt(t, ctx, atetest.OldV, "after the rollback")
	// The autoscaler takes the late node away again: the old pools' pods
	// that were Pending while every node was at NEW landed on it and took
	// actors, so it is emptied first, as the node runbook empties a node
	// (the pod garbage collector force-deletes an orphaned node's pods).
	emptyNode(t, ctx, late)
	if err := c.Client.CoreV1().Nodes().Delete(ctx, late, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	atetest.NoActorLost(t, ctx)
}

// emptyNode drains node's workers and suspends the actors on them, so that
// deleting the node loses none (they resume elsewhere on traffic).
func emptyNode(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	api := atetest.Client(t, ctx)
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		inv, err := api.Inventory(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // retried until the poll's deadline
		}
		for _, w := range inv.WorkersOnNode(node) {
			if w.State == ateapi.WorkerActive {
				if _, err := api.DrainWorker(ctx, w.Name); err != nil {
					return false, nil //nolint:nilerr // retried until the poll's deadline
				}
			}
		}
		empty := true
		for _, a := range inv.Actors {
			if a.Node != node {
				continue
			}
			empty = false
			if a.State == ateapi.ActorRunning {
				_, _ = api.SuspendActor(ctx, a.Atespace, a.Name) // read again on the next poll
			}
		}
		return empty, nil
	}); err != nil {
		t.Fatalf("could not empty %s: %v", node, err)
	}
}

// Step 6 leaves a trace rollbook can read: the API server's Deployment
// runs the new release's images. Recorded with "every node reached NEW"
// (the OLD release's images, step 6 comes after), they let a rollback say
// that step 6 ran, and refuse --control-plane-reverted while step 6's API
// server still runs: the flag states a fact, and what can be seen says
// otherwise. It used to take the flag at its word and move nodes back
// under the new API server.
func TestStep6IsSeenAndARevertToldIsChecked(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 12*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")

	dep, err := c.Client.AppsV1().Deployments(fleet.Namespace).Get(ctx, fleet.APIServerDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldImage := dep.Spec.Template.Spec.Containers[0].Image
	oldEra := dep.Spec.Template.Annotations["sim.rollbook.dev/api-era"]
	ds, err := c.Client.AppsV1().DaemonSets(fleet.Namespace).Get(ctx, "atelet-v0-3-0", metav1.GetOptions{})
	if err != nil || ds.Annotations[fleet.AnnAPIServerAtReached] != oldImage {
		t.Fatalf("every node reached %s: the API server's image %s should be recorded with it: %v %v", atetest.NewV, oldImage,
			err, ds.Annotations)
	}

	// Step 6: the API server moves to the new release.
	const newEra = "d"
	if oldEra == newEra {
		t.Fatalf("the scenario's API era is already %s", newEra)
	}
	atetest.DeployAPIServer(t, newEra)
	apiEra(t, ctx, newEra)
	out := atetest.ExpectRefused(t, ctx, "step 6 upgraded the control plane", "rollback")
	if !strings.Contains(out, "sim-era-"+newEra) || !strings.Contains(out, oldImage) {
		t.Errorf("the refusal should name the images step 6 changed")
	}
	if ds, err = c.Client.AppsV1().DaemonSets(fleet.Namespace).Get(ctx, "atelet-v0-3-0", metav1.GetOptions{}); err != nil ||
		!strings.Contains(ds.Annotations[fleet.AnnStep6Seen], "sim-era-"+newEra) {
		t.Fatalf("step 6 was seen but not recorded: %v %v", err, ds.Annotations)
	}
	if s := atetest.Status(t, ctx); !strings.Contains(s.ControlPlane, "step 6 upgraded") {
		t.Errorf("status should say step 6 ran: %q", s.ControlPlane)
	}

	// Told the OLD API server is back while step 6's runs: refused.
	atetest.ExpectRefused(t, ctx, "the OLD API server is not back", "rollback", "--control-plane-reverted")

	// Reverted for real, the same command moves every node back.
	atetest.DeployAPIServer(t, oldEra)
	apiEra(t, ctx, oldEra)
	atetest.MustRun(t, ctx, "rollback", "--control-plane-reverted", "--wait")
	atetest.AllAt(t, ctx, atetest.OldV, "after the rollback")
	atetest.NoActorLost(t, ctx)
}

// apiEra waits until the control API serves era (after its roll and the
// downtime that comes with it).
func apiEra(t *testing.T, ctx context.Context, era string) {
	t.Helper()
	want := strings.ToUpper(era)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		s := atetest.Status(t, ctx)
		return s.Capabilities != nil && string(s.Capabilities.Era) == want, nil
	}); err != nil {
		t.Fatalf("the control API does not serve era %s after its roll: %v", want, err)
	}
}

// ateSetup runs the sim's ate-setup with args.
func ateSetup(t *testing.T, args ...string) {
	t.Helper()
	sim, err := simtest.SimBinary()
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--dir", simtest.Get(t).Dir)
	if out, err := exec.Command(sim, append([]string{"ate-setup"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("sim ate-setup %v: %v\n%s", args, err, out)
	}
}

// ate-controller goes first (runbook step 2): it renders every pool, the
// clones too. Where its image tag tells it is still OLD's, neither
// clone-pools nor a node's move starts, and preflight says so; upgraded,
// the same commands go on. They used to clone and move under the old
// controller.
func TestTheControllerGoesFirst(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 6*time.Minute)
	// The rollbacks before ended with the runbook's last step, and a new
	// roll begins with step 3 alone.
	ateSetup(t, "deploy-controller", "--version", atetest.OldV)
	ateSetup(t, "deploy-atelet", "--version", atetest.NewV, "--controller=false")

	pools := len(atetest.Status(t, ctx).Cluster.Pools)
	out := atetest.ExpectRefused(t, ctx, "runbook step 2", atetest.CloneArgs...)
	if !strings.Contains(out, "ate-controller:"+atetest.OldV) || !strings.Contains(out, "deploy ate-controller") {
		t.Errorf("the refusal should name the controller's image and the command that upgrades it")
	}
	if after := len(atetest.Status(t, ctx).Cluster.Pools); after != pools {
		t.Fatalf("the refused clone-pools changed the pools: %d → %d", pools, after)
	}
	if out, _ := atetest.Run(t, ctx, "preflight"); !strings.Contains(out, "runbook step 2") {
		t.Errorf("preflight should show the controller's check failing")
	}

	ateSetup(t, "deploy-controller", "--version", atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--dry-run")
}
