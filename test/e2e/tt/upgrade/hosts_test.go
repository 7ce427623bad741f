//go:build e2e

package upgrade

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// The sim's model of a process: a privileged pod with host /dev opens the
// device only when this annotation says so (a CSI node plugin never does).
const annSimOpens = "sim.rollbook.dev/opens-tenstorrent"

func devVolume(p string) corev1.Volume {
	return corev1.Volume{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}}}
}

// barePod is pinned to node with spec.nodeName, as a person's `kubectl run`
// with an override would be.
func barePod(ns, name, node string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.com/" + name}}}}
	mutate(p)
	return p
}

func createPods(t *testing.T, ctx context.Context, pods ...*corev1.Pod) {
	t.Helper()
	c := simtest.Get(t)
	for _, p := range pods {
		if _, err := c.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.WaitForPod(ctx, c.Client, p.Namespace, p.Name, kube.PodReady); err != nil {
			t.Fatalf("pod %s never ran: %v", p.Name, err)
		}
	}
}

func podExists(t *testing.T, ns, name string) bool {
	_, err := simtest.Get(t).Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

// csiPodOn is the CSI node plugin's pod on node (it mounts /dev).
func csiPodOn(t *testing.T, ctx context.Context, node string) string {
	t.Helper()
	l, err := simtest.Get(t).Client.CoreV1().Pods("tt-system").List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=csi-node", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("csi-node pod on %s: %v (%d)", node, err, len(l.Items))
	}
	return l.Items[0].Name
}

// Every way a pod can hold the device is found; a pod mounting /dev for
// disks is not one. Bare holders need --force, as with kubectl drain: without
// it the node stops before its cordon.
func TestFirmwareMovesEveryKindOfHolder(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	ns := c.NewNamespace(t)
	const target = "kwok-node-1"
	csi := csiPodOn(t, ctx, target)
	plugin := barePod(ns, "plugin-user", target, func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"tenstorrent.com/n300": resource.MustParse("1")}
	})
	privileged := barePod(ns, "privileged-dev", target, func(p *corev1.Pod) {
		p.Annotations = map[string]string{annSimOpens: "true"}
		p.Spec.Volumes = []corev1.Volume{devVolume("/dev")}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "dev", MountPath: "/dev"}}
	})
	createPods(t, ctx, plugin, privileged)
	args := []string{"upgrade", "firmware", "--version", "19.9.0", "--bundle-url", bundle(t, "19.9.0"), "--nodes", target}
	out, code := run(t, ctx, args...)
	if code != cli.ExitBlocked || !strings.Contains(out, "plugin-user (requests tenstorrent.com/n300)") ||
		!strings.Contains(out, "privileged-dev (has /dev/tenstorrent open") || !strings.Contains(out, "--force") || strings.Contains(out,
		csi) {
		t.Fatalf("want blocked naming both bare holders (not the CSI pod) and --force; exit %d", code)
	}
	// Knowable from the pods before the cordon: the node is not taken out.
	n := node(t, target)
	if n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] != "" {
		t.Fatalf("bare holders stop the node before its cordon: unschedulable %v, left-cordoned %q", n.Spec.Unschedulable,
			n.Annotations[kube.AnnLeftCordoned])
	}
	if _, code := run(t, ctx, append(args, "--force")...); code != 0 {
		t.Fatalf("--force: exit %d", code)
	}
	n = node(t, target)
	if n.Labels[tt.LabelFirmware] != "19.9.0.0" || n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] != "" {
		t.Fatalf("after --force: fw %q unschedulable %v left-cordoned %q", n.Labels[tt.LabelFirmware], n.Spec.Unschedulable,
			n.Annotations[kube.AnnLeftCordoned])
	}
	if podExists(t, ns, "plugin-user") || podExists(t, ns, "privileged-dev") {
		t.Error("the holders were not evicted")
	}
	if !podExists(t, "tt-system", csi) {
		t.Error("the CSI node plugin (mounts /dev, never opens the device) was evicted")
	}
}

// A DaemonSet without the deploy gate and a Deployment tolerating the
// cordon keep holding the device: the run stops naming both, with the fix.
func TestHoldersThatStayAreNamedWithTheFix(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	ns := c.NewNamespace(t)
	const target = "kwok-node-0"
	labels := map[string]string{"app": "ungated"}
	spec := corev1.PodSpec{
		Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		NodeSelector: map[string]string{"kubernetes.io/hostname": target},
		Volumes:      []corev1.Volume{devVolume("/dev/tenstorrent")},
		Containers: []corev1.Container{{Name: "c", Image: "example.com/ungated",
			VolumeMounts: []corev1.VolumeMount{{Name: "dev", MountPath: "/dev/tenstorrent"}}}},
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ungated", Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stubborn := map[string]string{"app": "tolerates-all"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "tolerates-all", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: stubborn},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: stubborn}, Spec: spec}}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.WaitForDeploymentAvailable(ctx, c.Client, ns, "tolerates-all"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.WaitForDaemonSetPodReady(ctx, c.Client, ns, "ungated", target); err != nil {
		t.Fatal(err)
	}
	args := []string{"upgrade", "kmd", "--version", "2.8.1", "--nodes", target, "--drain-timeout", "8s"}
	for _, extra := range [][]string{nil, {"--force-unload"}} {
		// Knowable before the cordon: the DaemonSet's pods select no
		// gate, and the Deployment's tolerate the cordon. Killing their
		// processes (--force-unload) cannot help: they come back.
		untouched := simtest.Get(t).NeverCordoned(t, ctx, target)
		out, code := run(t, ctx, append(args, extra...)...)
		if code != cli.ExitBlocked || !strings.Contains(out, "DaemonSet "+ns+"/ungated") || !strings.Contains(out, "deploy gate") ||
			!strings.Contains(out, "tolerates-all-") || !strings.Contains(out, "tolerates the cordon") {
			t.Fatalf("%v: want blocked naming the ungated DaemonSet (with the fix) and the respawning pod; exit %d", extra, code)
		}
		if strings.Contains(out, "re-run with --force-unload") {
			t.Errorf("%v: the advice names --force-unload, which cannot move them", extra)
		}
		if !untouched() {
			t.Errorf("%v: the node was cordoned although its holders cannot leave", extra)
		}
	}
	if err := c.Client.AppsV1().DaemonSets(ns).Delete(ctx, "ungated", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.AppsV1().Deployments(ns).Delete(ctx, "tolerates-all", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Their pods go with them through the garbage collector, later: the
	// run's probe must not find them on the way out (it did on a loaded
	// machine).
	if err := kube.WaitForNoPods(ctx, c.Client, target, func(p *corev1.Pod) bool { return p.Namespace == ns }); err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, ctx, args...); code != 0 {
		t.Fatalf("after removing them: exit %d", code)
	}
}

// An image the registry does not have stops the node before its cordon,
// within seconds, and leaves nothing behind.
func TestHelperImagePullFailureStopsBeforeCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	const target = "kwok-node-2"
	before := node(t, target).Labels[tt.LabelKMDVersion]
	start := time.Now()
	out, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", target,
		"--helper-image", "ghcr.io/rollbook/node-agent:no-such-tag")
	took := time.Since(start)
	if code != cli.ExitBlocked || !strings.Contains(out, "ErrImagePull") || !strings.Contains(out, "not cordoned") {
		t.Fatalf("want blocked on the image pull; exit %d", code)
	}
	if took > 30*time.Second {
		t.Errorf("the pull failure was noticed after %s; want seconds", took)
	}
	n := node(t, target)
	if n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != before || n.Labels[tt.DefaultDeployGate] == "false" {
		t.Fatalf("the node was touched: unschedulable %v, kmd %q, gate %q", n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion],
			n.Labels[tt.DefaultDeployGate])
	}
	helpers, _ := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper,
		FieldSelector: "spec.nodeName=" + target})
	for _, h := range helpers.Items {
		t.Errorf("helper pod %s left behind (%s, deleting %v)", h.Name, h.Status.Phase, h.DeletionTimestamp != nil)
	}
	out, code = run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", target, "--helper-namespace", "no-such-ns")
	if code != cli.ExitUsage || !strings.Contains(out, `helper namespace "no-such-ns" does not exist`) ||
		!strings.Contains(out, "deploy/namespace.yaml") || node(t, target).Spec.Unschedulable {
		t.Fatalf("a missing helper namespace must be refused before anything changes, naming the manifest; exit %d", code)
	}

}

// After a reboot into a kernel without the module, the labels lie; every
// run measures, so nothing is disrupted until the node can be fixed.
func TestRebootedIntoNewKernel(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	const target = "kwok-node-0"
	root := filepath.Join(c.Dir, "hosts", target)
	const kernel = "6.8.0-99-generic"
	if err := fakehost.Reboot(root, kernel, false); err != nil {
		t.Fatal(err)
	}
	kmd := node(t, target).Labels[tt.LabelKMDVersion]
	out, code := run(t, ctx, "upgrade", "firmware", "--version", "19.9.0", "--bundle-url", bundle(t, "19.9.0"), "--nodes", target)
	if code != cli.ExitBlocked || !strings.Contains(out, "tt-kmd is not loaded") || node(t, target).Spec.Unschedulable {
		t.Fatalf("firmware on a node without the module: want blocked before the cordon; exit %d", code)
	}
	out, code = run(t, ctx, "upgrade", "kmd", "--version", kmd, "--nodes", target)
	if code != cli.ExitBlocked || !strings.Contains(out, "linux-headers-"+kernel) || node(t, target).Spec.Unschedulable {
		t.Fatalf("kmd with no headers for the new kernel: want blocked before the cordon; exit %d", code)
	}
	if err := fakehost.Reboot(root, kernel, true); err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", kmd, "--nodes", target); code != 0 {
		t.Fatalf("kmd after installing headers: exit %d", code)
	}
	if o, _ := fakehost.Inspect(root); o.LoadedKMD != kmd {
		t.Fatalf("module %q after the re-run, want %s", o.LoadedKMD, kmd)
	}
	// Back to the original kernel: the module persisted for it loads at boot.
	if err := fakehost.Reboot(root, fakehost.DefaultKernel, true); err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", kmd, "--nodes", target); code != 0 {
		t.Fatalf("kmd after rebooting back: exit %d", code)
	}
}

// A version tt-kmd never released is refused by the probe (git ls-remote
// finds no tag), before the node is cordoned; a real version then goes on.
func TestKMDUnknownVersionIsRefusedBeforeCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-1"
	out, code := run(t, ctx, "upgrade", "kmd", "--version", "99.0.0", "--nodes", target)
	if code != cli.ExitBlocked || !strings.Contains(out, "has no tag ttkmd-99.0.0") {
		t.Fatalf("want ttkmd-99.0.0 refused as blocked; exit %d", code)
	}
	if n := node(t, target); n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] != "" {
		t.Errorf("a refused version must leave the node in service: unschedulable %v, note %q", n.Spec.Unschedulable,
			n.Annotations[kube.AnnLeftCordoned])
	}
	if o, _ := fakehost.Inspect(filepath.Join(c.Dir, "hosts", target)); o.LoadedKMD == "" {
		t.Error("the old module must stay loaded")
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", target); code != 0 {
		t.Fatalf("a released version: exit %d", code)
	}
	if n := node(t, target); n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != "2.8.1" {
		t.Fatalf("after 2.8.1: unschedulable %v, label %q", n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion])
	}
}

// The sim's own model catches a flash under a live holder: run its tt-flash
// by hand on a node whose telemetry pod has the device open.
func TestSimRecordsFlashUnderHolder(t *testing.T) {
	c := simtest.Get(t)
	check := c.ExpectViolation(t, "flash-under-holder")
	const target = "kwok-node-1"
	root := filepath.Join(c.Dir, "hosts", target)
	o, err := fakehost.Inspect(root)
	if err != nil || o.Refcnt == 0 {
		t.Fatalf("%s should have device holders (telemetry, inference): %+v %v", target, o, err)
	}
	flash := exec.Command(filepath.Join(c.Dir, "hosts", ".tools", "tt-flash"), "flash", "--fw-tar",
		filepath.Join(c.Dir, "bundles", "fw_pack-19.9.0.fwbundle"))
	flash.Env = append(os.Environ(), fakehost.RootEnv+"="+root)
	if out, err := flash.CombinedOutput(); err == nil || !strings.Contains(string(out), "device busy") {
		t.Fatalf("tt-flash under a holder: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if v, _ := c.Violations(); len(v) > 0 && strings.Contains(v[len(v)-1], "flash-under-holder") {
			break
		}
	}
	check()
}
