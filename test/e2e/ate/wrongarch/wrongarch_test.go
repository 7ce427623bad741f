//go:build e2e

// Package wrongarch rolls to a clone whose worker image exists for another
// architecture only (the sim's registry holds the gvisor image for arm64,
// every node is amd64): a kubelet cannot pull it and the pod waits in
// ErrImagePull / ImagePullBackOff. Nothing in the cluster says an image's
// platform before a node pulls it, so the roll pulls each clone's images on
// one node of each platform before the first node of that platform moves:
// it must stop there, blocked, with nothing changed, naming the pull failure
// and the fix; after the fix the same command rolls, and no actor is lost.
package wrongarch

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
)

// multiArch is the gvisor image of another build whose index has amd64.
const multiArch = "registry.example/ateom-gvisor:v0.3.1@sha256:" +
	"1111111111111111111111111111111111111111111111111111111111111111"

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_SINGLE_ARCH_IMAGES", atetest.ImageGV+"=arm64")
	os.Setenv("ROLLBOOK_SIM_ATE_EVICTION_WINDOW", "3s")
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

func TestAnImageForAnotherArchitectureStopsTheRollBeforeTheFirstFlip(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// Preflight changes nothing: it says which pulls the roll makes first.
	if out, _ := atetest.Run(t, ctx, "preflight"); !strings.Contains(out, "not pulled yet") || !strings.Contains(out, "linux/amd64") {
		t.Errorf("preflight does not say the clones' images are still to be pulled on linux/amd64")
	}

	// Watch the probe pods: the gvisor clone's must really have waited in a
	// pull failure on a node (not be judged from the template), and be gone.
	w, err := c.Client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{LabelSelector: roll.LabelPullProbe})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	failedThenGone := make(chan struct{})
	go func() {
		failed := false
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, s := range p.Status.ContainerStatuses {
				if ws := s.State.Waiting; ws != nil && ws.Reason == "ErrImagePull" && s.Image == atetest.ImageGV {
					failed = true
				}
			}
			if failed && ev.Type == watch.Deleted {
				close(failedThenGone)
				return
			}
		}
	}()

	// A probe pod a killed run left behind (another image set) goes too.
	stale := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rollbook-pull-stale", Namespace: "ate-workers",
		Labels: map[string]string{roll.LabelPullProbe: "0000000000000000"}},
		Spec: corev1.PodSpec{NodeName: "kwok-node-1", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "pull-0", Image: atetest.ImageVM, Command: []string{"/none"}}}}}
	if _, err := c.Client.CoreV1().Pods(stale.Namespace).Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	out := atetest.ExpectRefused(t, ctx, "no match for platform in manifest", "roll", "next-node")
	if took := time.Since(start); took > 3*time.Minute {
		t.Errorf("the stop took %s: it waited out the pull budget instead of stopping on the failure", took)
	}
	for _, want := range []string{"linux/amd64", "multi-arch", "kubectl delete workerpool", "clone-pools --image", "nothing was changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the stop does not say %q", want)
		}
	}
	select {
	case <-failedThenGone:
	case <-time.After(time.Minute):
		t.Error("no probe pod waited in ErrImagePull for the gvisor image and then went")
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || n.Annotations[fleet.AnnMovingTo] != "" {
			t.Errorf("node %s was touched by a refused roll (cordoned %v, moving to %q)", n.Name, n.Spec.Unschedulable,
				n.Annotations[fleet.AnnMovingTo])
		}
	}
	l, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: roll.LabelPullProbe})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pull probe %s/%s left behind", p.Namespace, p.Name)
		}
	}

	// The fix the stop names before any node moved: delete the clones of
	// the image and clone again with one built for the nodes.
	deleteClonesOf(t, atetest.ImageGV)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel})
		if err != nil {
			return false, err
		}
		for _, p := range l.Items {
			if p.Spec.Containers[0].Image == atetest.ImageGV {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the deleted clones keep pods: %v", err)
	}
	atetest.MustRun(t, ctx, "roll", "clone-pools", "--image", "gvisor="+multiArch, "--image", "microvm="+atetest.ImageVM)
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait")
	atetest.AllAt(t, ctx, atetest.NewV, "after the roll")
	atetest.NoActorLost(t, ctx)
}

// deleteClonesOf deletes every clone whose worker image is image.
func deleteClonesOf(t *testing.T, image string) {
	t.Helper()
	ctx := simtest.Context(t, time.Minute)
	dyn := atetest.Dynamic(t)
	l, err := dyn.Resource(fleet.WorkerPoolGVR).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var deleted int
	for _, u := range l.Items {
		if img, _ := u.Object["spec"].(map[string]any)["workerImage"].(string); img != image {
			continue
		}
		if err := dyn.Resource(fleet.WorkerPoolGVR).Namespace(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted == 0 {
		t.Fatalf("no clone with image %s", image)
	}
}
