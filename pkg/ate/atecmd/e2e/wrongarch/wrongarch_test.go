// Package wrongarch rolls to a clone whose worker image exists for another
// architecture only (the sim's registry holds the gvisor image for arm64,
// every node is amd64): on the node it is scheduled to, the kubelet cannot
// pull it and the pod waits in ErrImagePull / ImagePullBackOff. Nothing in
// the cluster says an image's platform before a node pulls it, so the
// canary's verify is where the roll learns it: it must stop at once,
// blocked, naming the pod, the kubelet's message and the fix, not wait out
// its budget; and no actor may be lost.
package wrongarch

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/cli"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_SINGLE_ARCH_IMAGES", atetest.ImageGV+"=arm64")
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

func TestAnImageForAnotherArchitectureStopsTheRollAtTheCanaryWithTheFix(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	start := time.Now()
	out, code := atetest.Run(t, ctx, "roll", "next-node")
	if code != cli.ExitBlocked {
		t.Fatalf("roll next-node: exit %d, want %d (blocked)", code, cli.ExitBlocked)
	}
	if took := time.Since(start); took > 4*time.Minute {
		t.Errorf("the stop took %s: it waited out the verify budget instead of stopping on the pull failure", took)
	}
	for _, want := range []string{"no match for platform in manifest", "kubernetes.io/arch=amd64",
		"an image built for the nodes' architecture", "nodeSelector/affinity"} {
		if !strings.Contains(out, want) {
			t.Errorf("the stop does not say %q", want)
		}
	}
	// It names the very pod that cannot pull, with the kubelet's reason.
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: ate.PoolLabel})
	if err != nil {
		t.Fatal(err)
	}
	var named int
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				if p.Status.Phase != corev1.PodPending || s.Image != atetest.ImageGV {
					t.Errorf("pod %s/%s: %s in phase %s with image %s", p.Namespace, p.Name, w.Reason, p.Status.Phase, s.Image)
				}
				if strings.Contains(out, p.Namespace+"/"+p.Name) {
					named++
				}
			}
		}
	}
	if named == 0 {
		t.Error("the stop names no pod whose image does not pull")
	}
	atetest.NoActorLost(t, ctx)

	// The way back: rollback takes the canary back although its new pods
	// never ran (they never register, so the drain does not wait for them).
	atetest.MustRun(t, ctx, "rollback", "--wait")
	for n, v := range atetest.NodeLabels(t, ctx) {
		if v != atetest.OldV {
			t.Errorf("node %s at %s after the rollback", n, v)
		}
	}
	atetest.NoActorLost(t, ctx)
}
