//go:build e2e

// Package helperimage proves that what the plugin names is what the tests
// ran: the sim runs helpers from the node-agent image `make image` built
// (its OCI layout, unpacked layer by layer) and pulls nothing else. The
// plugin's --helper-image is that image by digest, as a release's default
// is; its helpers run and report that digest; a helper naming any other
// image, even the same repository by another digest, fails with the
// kubelet's pull error and the node is never touched.
package helperimage

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "tt-fleet"}) }

// builtImage is the image the harness gave the sim and the plugin, by
// digest; the test skips, saying why, when helpers run outside any image.
func builtImage(t *testing.T) (repo, digest string) {
	t.Helper()
	ref := os.Getenv("ROLLBOOK_HELPER_IMAGE")
	repo, digest, ok := strings.Cut(ref, "@")
	if !ok {
		t.Skipf("no node-agent image (helpers run outside it, %q): build it with `make image` as root", ref)
	}
	return repo, digest
}

// Every helper of a kmd upgrade names the built image by digest, runs
// from it (its status's imageID, as a kubelet reports the image it ran)
// and succeeds.
func TestHelpersRunTheBuiltImage(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	repo, digest := builtImage(t)
	ctx := simtest.Context(t, 4*time.Minute)
	w, err := c.Client.CoreV1().Pods(deploy.HelperNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]corev1.ContainerStatus{} // by helper pod, once it ended
	images := map[string]bool{}
	go func() {
		for e := range w.ResultChan() {
			p, ok := e.Object.(*corev1.Pod)
			if !ok || e.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			images[p.Spec.Containers[0].Image] = true
			if kube.PodTerminal(p) && len(p.Status.ContainerStatuses) == 1 {
				ran[p.Name] = p.Status.ContainerStatuses[0]
			}
			mu.Unlock()
		}
	}()
	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--nodes", "kwok-node-0")
	w.Stop()
	if code != 0 {
		t.Fatalf("kmd upgrade with the built image: exit %d\n%s", code, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(images) != 1 || !images[repo+"@"+digest] {
		t.Fatalf("helpers named %v; want only the built image %s@%s", images, repo, digest)
	}
	if len(ran) < 2 { // a probe and the kmd helper at least
		t.Fatalf("%d helpers seen ending, want the probe and kmd helpers", len(ran))
	}
	for name, cs := range ran {
		if cs.ImageID != repo+"@"+digest || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			t.Errorf("helper %s: imageID %q, state %+v; want the built image, exit 0", name, cs.ImageID, cs.State)
		}
	}
}

// A helper naming the image's repository by another digest, or a tag the
// registry lacks, never runs: the kubelet's pull error reaches the user
// and the node is not cordoned.
func TestAnotherImageFailsToPull(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	repo, digest := builtImage(t)
	const target = "kwok-node-1"
	other := "sha256:" + strings.Repeat("0", 64)
	if digest == other {
		t.Fatal("the built image has the digest this test uses for another")
	}
	for _, image := range []string{repo + "@" + other, "ghcr.io/someone/node-agent@" + digest, repo + ":no-such-tag"} {
		ctx := simtest.Context(t, 2*time.Minute)
		before := tttest.Node(t, target).Labels[tt.LabelKMDVersion]
		out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", target, "--helper-image", image)
		want := `failed to pull and unpack image "` + image + `": failed to resolve reference "` + image + `": ` + image + `: not found`
		if code != cli.ExitBlocked || !strings.Contains(out, "ErrImagePull") || !strings.Contains(out, want) ||
			!strings.Contains(out, "not cordoned") {
			t.Fatalf("--helper-image %s: want blocked with the kubelet's pull error (%s); exit %d", image, want, code)
		}
		n := tttest.Node(t, target)
		if n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != before {
			t.Fatalf("--helper-image %s: the node was touched (unschedulable %v, kmd %q)", image, n.Spec.Unschedulable,
				n.Labels[tt.LabelKMDVersion])
		}
		noHelperLeft(t, c, target)
	}
}

// A node of another platform than the image's (one labelled arm64; the
// release builds linux/amd64 only): the probe's pull fails as containerd
// reports it, the node is not cordoned, and the error names the node's
// platform, the image's, and the ways out.
func TestANodeOfAnotherPlatformIsNamedBeforeItsCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	builtImage(t)
	const target = "kwok-node-1"
	ctx := simtest.Context(t, 2*time.Minute)
	setArch := func(arch string) {
		patch := `{"metadata":{"labels":{"` + corev1.LabelArchStable + `":"` + arch + `"}}}`
		if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), target, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := tttest.Node(t, target)
	setArch("arm64")
	defer setArch(before.Labels[corev1.LabelArchStable])

	out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", target)
	for _, want := range []string{"no match for platform in manifest", "node " + target + " is linux/arm64",
		"built for linux/amd64 only", "--helper-image", "not cordoned"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q", want)
		}
	}
	if code != cli.ExitBlocked {
		t.Errorf("exit %d, want %d (blocked)", code, cli.ExitBlocked)
	}
	n := tttest.Node(t, target)
	if n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != before.Labels[tt.LabelKMDVersion] {
		t.Fatalf("the node was touched (unschedulable %v, kmd %q)", n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion])
	}
	noHelperLeft(t, c, target)
}

// noHelperLeft fails t for each helper pod still on node.
func noHelperLeft(t *testing.T, c *simtest.Cluster, node string) {
	t.Helper()
	helpers, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{
		LabelSelector: kube.LabelHelper, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range helpers.Items {
		t.Errorf("helper pod %s left behind (%s)", h.Name, h.Status.Phase)
	}
}
