//go:build e2e

package upgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// pinned is a one-replica Deployment on node; dev mounts /dev/tenstorrent.
func pinned(t *testing.T, ctx context.Context, ns, name, node string, dev bool) *corev1.Pod {
	t.Helper()
	c := simtest.Get(t)
	labels := map[string]string{"app": name}
	spec := corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node},
		Containers: []corev1.Container{{Name: "c", Image: "example.com/" + name}}}
	if dev {
		spec.Volumes = []corev1.Volume{devVolume("/dev/tenstorrent")}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "dev", MountPath: "/dev/tenstorrent"}}
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.WaitForDeploymentAvailable(ctx, c.Client, ns, name); err != nil {
		t.Fatal(err)
	}
	l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("pods of %s: %v (%d)", name, err, len(l.Items))
	}
	return &l.Items[0]
}

func TestUpgradeSMI(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	out, code := run(t, ctx, "upgrade", "smi", "--version", fakehost.ImageTTSMIVersion, "--nodes", "kwok-node-0,kwok-node-1")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, n := range []string{"kwok-node-0", "kwok-node-1"} {
		if got := node(t, n).Labels[tt.LabelSMIVersion]; got != fakehost.ImageTTSMIVersion {
			t.Errorf("%s: tt-smi label %q", n, got)
		}
	}
	if !strings.Contains(out, "done") {
		t.Errorf("summary lacks done:\n%s", out)
	}
	// A version the helper image does not ship fails, and says which it has.
	if out, code := run(t, ctx, "upgrade", "smi", "--version", "9.9.9", "--nodes", "kwok-node-0"); code != cli.ExitFailed ||
		!strings.Contains(out, fakehost.ImageTTSMIVersion) {
		t.Fatalf("wrong tt-smi version: exit %d", code)
	}
}

// --pod-selector limits the full-node drain; device holders move anyway.
func TestKMDPodSelector(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	ns := c.NewNamespace(t)
	const target = "kwok-node-2"
	keep := pinned(t, ctx, ns, "keep-me", target, false)
	evict := pinned(t, ctx, ns, "evict-me", target, false)
	// A version the node is not at, whatever earlier tests of the package
	// left there: at the target only the label would be written, no drain.
	version := "2.9.0"
	if node(t, target).Labels[tt.LabelKMDVersion] == version {
		version = "2.8.1"
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", version, "--nodes", target, "--pod-selector", "app=evict-me"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !podExists(t, ns, keep.Name) {
		t.Error("a pod outside --pod-selector was drained")
	}
	if podExists(t, ns, evict.Name) {
		t.Error("the pod matching --pod-selector was not drained")
	}
}

// --drain=false moves nothing: the helper finds the holder and refuses,
// and never unloads the module under it.
func TestKMDNoDrainRefusesUnderHolder(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	ns := c.NewNamespace(t)
	const target = "kwok-node-1"
	holder := pinned(t, ctx, ns, "busy", target, true)
	out, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.1", "--nodes", target, "--drain=false")
	if code != cli.ExitBlocked || !strings.Contains(out, "DeviceInUse") || !strings.Contains(out, holder.Name) {
		t.Fatalf("want blocked naming the holder pod; exit %d", code)
	}
	if !podExists(t, ns, holder.Name) {
		t.Fatal("--drain=false evicted a pod")
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.1", "--nodes", target); code != 0 {
		t.Fatalf("with the drain: exit %d", code)
	}
}

// --halt-on-failure=false goes on past failures, but nodes a failure left
// cordoned keep their --max-parallel slots.
func TestFirmwareKeepGoingKeepsTheBudget(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	nodes := "kwok-node-0,kwok-node-2," + dkmsNode
	failFlash(t, true)
	out, code := run(t, ctx, "upgrade", "firmware", "--version", "19.9.0", "--bundle-url", bundle(t, "19.9.0"),
		"--nodes", nodes, "--max-parallel", "2", "--halt-on-failure=false")
	failFlash(t, false)
	if code != cli.ExitFailed || !strings.Contains(out, "out of service") {
		t.Fatalf("want two failed nodes and the third held back by the budget; exit %d", code)
	}
	cordoned := 0
	for _, n := range strings.Split(nodes, ",") {
		if kube.CordonStateOf(node(t, n)).Owner == tt.FirmwareRunbookName {
			cordoned++
		}
	}
	if cordoned != 2 {
		t.Fatalf("%d nodes out of service with --max-parallel 2", cordoned)
	}
	if _, code := run(t, ctx, "upgrade", "firmware", "--version", "19.9.0", "--bundle-url", bundle(t, "19.9.0"),
		"--nodes", nodes, "--max-parallel", "2", "--halt-on-failure=false"); code != 0 {
		t.Fatalf("fixed re-run: exit %d", code)
	}
	for _, n := range strings.Split(nodes, ",") {
		if got := node(t, n); got.Labels[tt.LabelFirmware] != "19.9.0.0" || got.Spec.Unschedulable {
			t.Errorf("%s: fw %q unschedulable %v", n, got.Labels[tt.LabelFirmware], got.Spec.Unschedulable)
		}
	}
}
