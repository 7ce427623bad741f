//go:build e2e

// Package probefirst runs kubectl tt upgrade kmd against hosts in a state
// the kmd helper would fail on, or need not run for, and that the probe can
// know without touching the node: each must stop (or finish) the node
// before its cordon.
package probefirst

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/deploy"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
	"github.com/rollbook/rollbook/pkg/version"
)

// fleetKMD is what the tt-fleet scenario's hosts run and cache (sim/tthost).
const fleetKMD = "2.7.0"

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 4, Scenario: "tt-fleet"}) }

// The shared e2e helpers (internal/tttest).
var node, host, hostRoot = tttest.Node, tttest.Host, tttest.HostRoot

var run = tttest.Run

// blockedUncordoned: upgrade kmd of target is refused before its cordon.
func blockedUncordoned(t *testing.T, ctx context.Context, target string, want []string, args ...string) string {
	t.Helper()
	return tttest.BlockedUncordoned(t, ctx, target, want, append([]string{"upgrade", "kmd", "--nodes", target}, args...)...)
}

// A version tt-kmd never tagged, or a tag that names another commit than
// the pin, is found by git ls-remote in the probe, not by the clone after
// the drain.
func TestMissingTagStopsBeforeCordon(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-0"
	blockedUncordoned(t, ctx, target, []string{"has no tag ttkmd-2.99.0", "git ls-remote --tags"}, "--version", "2.99.0")
	const wrong = "0123456789abcdef0123456789abcdef01234567"
	blockedUncordoned(t, ctx, target, []string{"names commit " + fakehost.FakeCommit("ttkmd-2.8.0"), "not the pinned " + wrong},
		"--version", "2.8.0", "--kmd-commit", wrong)
}

// Debian's headers name their compiler (gcc-12): a host with headers and
// another gcc cannot build, so the node is not taken out; with gcc-12 it is
// upgraded.
func TestHeadersCompilerMissingStopsBeforeCordon(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	const target, kernel = "kwok-node-1", "6.1.0-28-amd64"
	root := hostRoot(t, target)
	// Rebooted into a Debian kernel: nothing cached or loaded for it.
	if err := fakehost.Reboot(root, kernel, false); err != nil {
		t.Fatal(err)
	}
	if err := fakehost.InstallHeaders(root, kernel, true); err != nil {
		t.Fatal(err)
	}
	gcc12 := filepath.Join(root, "usr/bin/gcc-12")
	if err := os.Rename(gcc12, filepath.Join(root, "usr/bin/gcc-11")); err != nil {
		t.Fatal(err)
	}
	blockedUncordoned(t, ctx, target, []string{"the compiler gcc-12", "install gcc-12"}, "--version", fleetKMD)
	if err := os.WriteFile(gcc12, []byte("#!fake host toolchain\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", fleetKMD, "--nodes", target); code != 0 {
		t.Fatalf("with gcc-12: exit %d", code)
	}
	if h := host(t, target); h.LoadedKMD != fleetKMD {
		t.Fatalf("with gcc-12 the host runs %q", h.LoadedKMD)
	}
}

// Ubuntu's HWE kernels name their compiler (gcc-12) only in the kernel
// config, on hosts whose default gcc is 11: the probe reads it there, a
// host without it is not taken out, and with it the build gets CC=. Before,
// the node was cordoned and drained and kbuild then failed with gcc-11.
func TestUbuntuHWEKernelsCompilerIsTheOneUsed(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	const target, kernel = "kwok-node-1", "6.8.0-60-generic"
	root := hostRoot(t, target)
	if err := fakehost.Reboot(root, kernel, false); err != nil {
		t.Fatal(err)
	}
	if err := fakehost.InstallUbuntuHWEHeaders(root, kernel, false); err != nil {
		t.Fatal(err)
	}
	const cc = "x86_64-linux-gnu-gcc-12"
	blockedUncordoned(t, ctx, target, []string{"built with the compiler " + cc, "install " + cc}, "--version", fleetKMD)
	if err := os.WriteFile(filepath.Join(root, "usr/bin", cc), []byte("#!fake host toolchain\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, "upgrade", "kmd", "--version", fleetKMD, "--nodes", target); code != 0 {
		t.Fatalf("with %s: exit %d\n%s", cc, code, out)
	}
	if h := host(t, target); h.LoadedKMD != fleetKMD || h.Kernel != kernel {
		t.Fatalf("with %s the host runs %q on %q", cc, h.LoadedKMD, h.Kernel)
	}
}

// Under Secure Boot's lockdown, module.sig_enforce or modules_disabled the
// kernel would refuse the module: the probe says so before the cordon.
func TestUnsignedModuleRefusedStopsBeforeCordon(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-2"
	root := hostRoot(t, target)
	for name, s := range map[string]fakehost.Spec{
		"sig_enforce":      {SigEnforce: true},
		"lockdown":         {Lockdown: "integrity"},
		"modules_disabled": {ModulesDisabled: true},
	} {
		t.Run(name, func(t *testing.T) {
			if err := fakehost.SetModulePolicy(root, s); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fakehost.SetModulePolicy(root, fakehost.Spec{}) })
			want := "the kernel refuses unsigned modules"
			if s.ModulesDisabled {
				want = "kernel.modules_disabled is 1"
			}
			blockedUncordoned(t, ctx, target, []string{want, "tt-kmd " + fleetKMD + " stays loaded"}, "--version", "2.8.0")
		})
	}
}

// A node whose cards are gone from the PCI bus is reported, not counted
// done, even at the target version with its label.
func TestCardGoneIsReported(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-3"
	if err := fakehost.PullCards(hostRoot(t, target)); err != nil {
		t.Fatal(err)
	}
	if l := node(t, target).Labels[tt.LabelKMDVersion]; l != fleetKMD {
		t.Fatalf("the sim did not label the node %s: %q", fleetKMD, l)
	}
	blockedUncordoned(t, ctx, target, []string{"no Tenstorrent PCI device (vendor 0x1e52)", "reseat or replace"},
		"--version", fleetKMD)
}

// A card whose firmware does not answer keeps its /dev node (tt-kmd makes
// it although the card's init failed): it is not served, so the node is
// neither done at the target nor taken out for a swap or flash that could
// not be verified; answering again, it is done. Before, the node at the
// target counted done with exit 0.
func TestSilentCardIsNotServed(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-0"
	root := hostRoot(t, target)
	if err := fakehost.SetSilent(root, 1, true); err != nil {
		t.Fatal(err)
	}
	if h := host(t, target); h.LoadedKMD != fleetKMD {
		t.Fatalf("the host runs %q, want %s", h.LoadedKMD, fleetKMD)
	}
	want := []string{"/dev/tenstorrent/1: the card does not answer tt-kmd " + fleetKMD, "tt-smi -r"}
	blockedUncordoned(t, ctx, target, want, "--version", fleetKMD)
	blockedUncordoned(t, ctx, target, want, "--version", "2.8.0")
	if err := fakehost.SetSilent(root, 1, false); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, ctx, "upgrade", "kmd", "--version", fleetKMD, "--nodes", target); code != 0 {
		t.Fatalf("answering again: exit %d\n%s", code, out)
	}
}

// A card the target tt-kmd's id table does not bind (Blackhole before
// 1.31, Grayskull from 2.2.0) would have no driver after the swap: the
// node is refused before its cordon, naming the card and the versions
// that drive it. Before, the device check after the drain found it.
func TestCardTheTargetDoesNotDriveStopsBeforeCordon(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-0"
	root := hostRoot(t, target)
	if err := fakehost.SetBoard(root, 1, "p150"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := fakehost.SetBoard(root, 1, "n150"); err != nil {
			t.Error(err)
		}
	}()
	blockedUncordoned(t, ctx, target, []string{"tt-kmd 1.30 would leave 1 card(s) of the node (Blackhole, 1e52:b140) without a driver",
		"from 1.31"}, "--version", "1.30")
}

// A node already running the target whose label is missing gets the label
// and nothing else: no cordon, no helper, no module reload.
func TestAtTargetGetsOnlyTheLabel(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-0"
	patch := `{"metadata":{"labels":{"` + tt.LabelKMDVersion + `":null}}}`
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if h := host(t, target); h.LoadedKMD != fleetKMD {
		t.Fatalf("the host runs %q, want %s", h.LoadedKMD, fleetKMD)
	}
	ops, _ := fakehost.Ops(hostRoot(t, target))
	untouched := simtest.Get(t).NeverCordoned(t, ctx, target)
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", fleetKMD, "--nodes", target); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !untouched() {
		t.Error("the node was cordoned for a label")
	}
	if l := node(t, target).Labels[tt.LabelKMDVersion]; l != fleetKMD {
		t.Errorf("label %q, want %s", l, fleetKMD)
	}
	if after, _ := fakehost.Ops(hostRoot(t, target)); len(after) != len(ops) {
		t.Errorf("the host changed: %v", after[len(ops):])
	}
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper,
		FieldSelector: "spec.nodeName=" + target})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		t.Errorf("helper pod %s left on the node", p.Name)
	}
}

// tt-kmd tagged its releases before 2.0 with two parts (ttkmd-1.34, module
// version 1.34): such a version is installed and labelled as it is.
func TestTwoPartVersionInstalls(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-2"
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "1.34", "--nodes", target); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if h := host(t, target); h.LoadedKMD != "1.34" {
		t.Errorf("the host runs %q, want 1.34", h.LoadedKMD)
	}
	if n := node(t, target); n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != "1.34" {
		t.Errorf("unschedulable %v, label %q", n.Spec.Unschedulable, n.Labels[tt.LabelKMDVersion])
	}
}

// A ResourceQuota in the helpers' namespace with no room answers the
// helper's pod with 403, as a missing role does: the run stops before the
// cordon and names the quota, not the role.
func TestAFullQuotaIsNamedBeforeTheCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-room", Namespace: deploy.HelperNamespace},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	c.CreateQuota(t, ctx, q)
	out := blockedUncordoned(t, ctx, "kwok-node-1", []string{"a ResourceQuota in namespace " + deploy.HelperNamespace + " refuses",
		"exceeded quota: no-room"}, "--version", "2.8.0")
	if strings.Contains(out, "deploy/rbac/") {
		t.Errorf("a quota's refusal was blamed on the role:\n%s", out)
	}
}

// A quota with room for fewer helpers than the nodes the run works on at
// once admits the first helper (the dry run passes) and refuses the one
// of the node past the room — after that node's cordon and drain. It is
// read before the first cordon: the run stops, names the quota and the
// --max-parallel that fits, and cordons nothing.
func TestQuotaRoomBelowMaxParallelStopsBeforeTheCordon(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "room-for-one", Namespace: deploy.HelperNamespace},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
	c.CreateQuota(t, ctx, q)
	other := c.NeverCordoned(t, ctx, "kwok-node-2")
	blockedUncordoned(t, ctx, "kwok-node-1", []string{"ResourceQuota " + deploy.HelperNamespace + "/room-for-one (pods) has room for 1",
		"--max-parallel 1"}, "--nodes", "kwok-node-2", "--version", "2.8.0", "--max-parallel", "2")
	if !other() {
		t.Error("kwok-node-2 was cordoned")
	}
}

// With --kmd-commit, a node already at the version is labelled only when
// the build it runs is the pinned commit's: the loaded module's srcversion
// found in the node's module cache names its commit. Another build of the
// version is refused before anything happens, with the way on; without
// the pin it is labelled, as before. Before, --kmd-commit was not asked on
// this path at all.
func TestKMDCommitIsCheckedOnANodeAtTheVersion(t *testing.T) {
	simtest.Get(t).ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	const target = "kwok-node-0"
	v := host(t, target).LoadedKMD
	if v == "" {
		t.Fatalf("%s loads no tt-kmd", target)
	}
	pin := fakehost.FakeCommit("ttkmd-" + v)
	if out, code := run(t, ctx, "upgrade", "kmd", "--nodes", target, "--version", v, "--kmd-commit", pin); code != 0 {
		t.Fatalf("the tag's build, pinned: exit %d\n%s", code, out)
	}
	if err := fakehost.LoadForeignBuild(hostRoot(t, target)); err != nil {
		t.Fatal(err)
	}
	blockedUncordoned(t, ctx, target, []string{"tt-kmd " + v + " is loaded", "its commit is unknown", "leave out --kmd-commit"},
		"--version", v, "--kmd-commit", pin)
	if out, code := run(t, ctx, "upgrade", "kmd", "--nodes", target, "--version", v); code != 0 {
		t.Fatalf("without --kmd-commit: exit %d\n%s", code, out)
	}
	if l := node(t, target).Labels[tt.LabelKMDVersion]; l != v {
		t.Errorf("label %q, want %s", l, v)
	}
}

// A node an earlier run left cordoned, whose probe record is gone
// (removed by hand, or written by a release that kept none) and with that
// run's probe still on it: the run probes it again, goes on from the
// cordon and removes the earlier probe. Before, the build step read the
// missing record and the run panicked, the node left cordoned.
func TestANodeInProgressWithoutItsRecordIsProbedAgain(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-0"
	v := host(t, target).LoadedKMD
	const earlier = "20261206-235959-0ld0ld"
	change, _ := kube.CordonChange(node(t, target), tt.KMDRunbookName, earlier)
	change.Annotations[tt.AnnProbe] = nil
	if _, err := kube.SetNodeKeys(ctx, c.Client, target, change); err != nil {
		t.Fatal(err)
	}
	left := leaveProbe(t, ctx, target, earlier)
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", v, "--nodes", target); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	n := node(t, target)
	if n.Spec.Unschedulable || n.Labels[tt.LabelKMDVersion] != v || n.Annotations[tt.AnnProbe] == "" {
		t.Errorf("unschedulable %v, label %q, probe record %t; want uncordoned at %s with a record", n.Spec.Unschedulable,
			n.Labels[tt.LabelKMDVersion], n.Annotations[tt.AnnProbe] != "", v)
	}
	p, err := c.Client.CoreV1().Pods(left.Namespace).Get(ctx, left.Name, metav1.GetOptions{})
	if err == nil && p.DeletionTimestamp == nil {
		t.Errorf("the earlier run's probe %s is still there (%s)", p.Name, p.Status.Phase)
	}
}

// A run killed between its probe's record and the probe's deletion leaves
// the probe behind; the node may be finished by then (the module was
// loaded already). The next run over it finds nothing to do, yet removes
// the earlier run's probe (its probe step does, before its own probe).
func TestAnEarlierRunsProbeOnAFinishedNodeIsRemoved(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	const target = "kwok-node-0"
	v := host(t, target).LoadedKMD
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", v, "--nodes", target); code != 0 {
		t.Fatalf("the run that finishes the node: exit %d", code)
	}
	left := leaveProbe(t, ctx, target, "20261206-235959-1eft0v")
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", v, "--nodes", target); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	p, err := c.Client.CoreV1().Pods(left.Namespace).Get(ctx, left.Name, metav1.GetOptions{})
	if err == nil && p.DeletionTimestamp == nil {
		t.Errorf("the earlier run's probe %s is still there (%s)", p.Name, p.Status.Phase)
	}
}

// leaveProbe creates the probe helper an earlier run (run) would have left
// on node.
func leaveProbe(t *testing.T, ctx context.Context, node, run string) *corev1.Pod {
	t.Helper()
	h := tt.HelperConfig{Image: os.Getenv(ttcmd.HelperImageEnv), Namespace: deploy.HelperNamespace, Timeout: 10 * time.Minute,
		PriorityClass: deploy.HelperPriorityClass}
	if h.Image == "" {
		h.Image = version.HelperImage()
	}
	left := tt.ProbeSpec(h, node, run).Pod()
	if _, err := simtest.Get(t).Client.CoreV1().Pods(left.Namespace).Create(ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return left
}
