//go:build e2e

package verbs

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
)

// strayAtelets adds two atelet DaemonSets of other versions (no node
// carries their label, so they run no pod): with the installed one, three.
func strayAtelets(t *testing.T, ctx context.Context) func() {
	c := simtest.Get(t)
	dss := c.Client.AppsV1().DaemonSets(fleet.Namespace)
	var names []string
	for _, v := range []string{"v0-8-0", "v0-9-0"} {
		labels := map[string]string{fleet.AppLabel: fleet.AteletApp, fleet.VersionLabel: strings.ReplaceAll(v, "-", ".")}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "atelet-" + v, Labels: labels},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{NodeSelector: map[string]string{fleet.VersionLabel: labels[fleet.VersionLabel]},
						Containers: []corev1.Container{{Name: "atelet", Image: "registry.example/atelet:" + v}}}}}}
		if _, err := dss.Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, ds.Name)
	}
	return func() {
		for _, n := range names {
			_ = dss.Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	}
}

// unlabelledNode adds a node without the version label.
func unlabelledNode(t *testing.T, ctx context.Context) func() {
	c := simtest.Get(t)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rollbook-unlabelled"}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) }
}

// Bad input to kubectl ate: the exit code, a message naming the input and
// the fix, and no change to the cluster at all (nodes, pods, DaemonSets,
// WorkerPools, the Lease, the history ConfigMap). ate has no selector flag,
// and the WorkerPool CRD cannot be removed from the shared fleet without
// destroying it, so neither is a row here.
func TestBadInputChangesNothing(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	digest := "@sha256:" + strings.Repeat("ab", 32)
	rows := []struct {
		setup func(*testing.T, context.Context) func()
		args  []string
		code  int
		input string // the message names it
		fix   string // and says what to do
	}{
		{nil, []string{"roll", "next-node", "no-such-node"}, cli.ExitUsage, `"no-such-node"`, "kubectl get nodes"},
		{nil, []string{"roll", "next-node", "kwok-nod-1"}, cli.ExitUsage, `"kwok-nod-1"`, "kubectl get nodes"},
		{nil, []string{"roll", "next-node", "kwok-node-0;reboot"}, cli.ExitUsage, "kwok-node-0;reboot", "kubectl get nodes"},
		{nil, []string{"roll", "next-node", "$(reboot)"}, cli.ExitUsage, "$(reboot)", "kubectl get nodes"},
		{nil, []string{"roll", "next-node", "kwok-node-0", "kwok-node-1"}, cli.ExitUsage, "2", "at most 1"},
		{nil, []string{"roll", "next-node", "--all", "kwok-node-0"}, cli.ExitUsage, "--all", "not both"},
		{nil, []string{"roll", "next-node", "--max-concurrent-suspends", "0"}, cli.ExitUsage, "--max-concurrent-suspends", "at least 1"},
		{nil, []string{"roll", "next-node", "--canary", "1"}, cli.ExitUsage, "--canary", "--soak"},
		{nil, []string{"roll", "next-node", "--soak", "-1s"}, cli.ExitUsage, "--soak", "-1s"},
		{nil, []string{"roll", "next-node", "--dry-run=server"}, cli.ExitUsage, "--dry-run=server", "--dry-run=client"},
		{nil, []string{"roll", "next-node", "-o", "xml"}, cli.ExitUsage, "xml", "json"},
		{nil, []string{"roll", "next-node", "--frobnicate"}, cli.ExitUsage, "frobnicate", "--help"},
		{nil, []string{"roll", "next-node", "--lock-namespace", "no-such-namespace"}, cli.ExitUsage, "no-such-namespace",
			"--lock-namespace"},
		{nil, []string{"rollback", "next-node", "no-such-node"}, cli.ExitUsage, `"no-such-node"`, "kubectl get nodes"},
		{nil, []string{"roll", "clone-pools"}, cli.ExitUsage, "--image", "@sha256:"},
		{nil, []string{"roll", "clone-pools", "--image", "registry.example/ateom:v3"}, cli.ExitUsage, "registry.example/ateom:v3",
			"@sha256:"},
		{nil, []string{"roll", "clone-pools", "--image", "gvisor=registry.example/ateom@sha256:abc"}, cli.ExitUsage, "sha256:abc",
			"@sha256:"},
		{nil, []string{"roll", "clone-pools", "--image", "gvisor=registry.example/ateom:v3;rm -rf /" + digest}, cli.ExitUsage,
			"rm -rf", "@sha256:"},
		{nil, []string{"roll", "clone-pools", "--image", "gvi$or=registry.example/ateom:v3" + digest}, cli.ExitUsage, "gvi$or",
			"CLASS="},
		{nil, []string{"recover-node"}, cli.ExitUsage, "received 0", "accepts 1 arg"},
		{nil, []string{"recover-node", "no-such-node"}, cli.ExitUsage, `"no-such-node"`, "kubectl get nodes"},
		{nil, []string{"recover-node", "Kwok_Node;id"}, cli.ExitUsage, "Kwok_Node;id", "kubectl get nodes"},
		{nil, []string{"recover-node", "kwok-node-0", "--max-concurrent-suspends", "0"}, cli.ExitUsage, "--max-concurrent-suspends",
			"at least 1"},
		{nil, []string{"recover-node", "kwok-node-0", "--lock-namespace", "no-such-namespace"}, cli.ExitUsage, "no-such-namespace",
			"--lock-namespace"},
		{nil, []string{"status", "-o", "xml"}, cli.ExitUsage, "xml", "json"},
		{nil, []string{"preflight", "-o", "xml"}, cli.ExitUsage, "xml", "json"},
		{nil, []string{"history", "-o", "xml"}, cli.ExitUsage, "xml", "json"},
		{nil, []string{"revert", "chat-1"}, cli.ExitUsage, "with an ACTOR", "-a ATESPACE is required"},
		{nil, []string{"pause", "extra-arg"}, cli.ExitUsage, "extra-arg", `for "kubectl ate pause"`},
		{nil, []string{"status", "--context", "no-such-context"}, cli.ExitUsage, "no-such-context", "kubectl config get-contexts"},
		{nil, []string{"roll", "next-node", "--context", "no-such-context"}, cli.ExitUsage, "no-such-context",
			"kubectl config get-contexts"},
		// Cluster states the roll must not touch: refused (exit 3), nothing changed.
		{strayAtelets, []string{"roll", "next-node"}, cli.ExitBlocked, "3 atelet DaemonSets", "delete the stray one"},
		{strayAtelets, []string{"preflight"}, cli.ExitBlocked, "atelet-v0-9-0", "delete the stray DaemonSet"},
		{unlabelledNode, []string{"roll", "next-node"}, cli.ExitBlocked, "rollbook-unlabelled", "label them " + fleet.VersionLabel},
		{unlabelledNode, []string{"preflight"}, cli.ExitBlocked, "1 unlabelled", "kubectl label node NODE " + fleet.VersionLabel},
	}
	for _, tc := range rows {
		cleanup := func() {}
		if tc.setup != nil {
			cleanup = tc.setup(t, ctx)
		}
		before := c.Snapshot(t, fleet.WorkerPoolGVR)
		out, code := atetest.Run(t, ctx, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.input) || !strings.Contains(out, tc.fix) {
			t.Errorf("%q: exit %d (want %d); the message must name %q and the fix %q:\n%s", tc.args, code, tc.code, tc.input, tc.fix, out)
		}
		if after := c.Snapshot(t, fleet.WorkerPoolGVR); bookkept(after, tc.code) != bookkept(before, tc.code) {
			t.Errorf("%q changed the cluster:\n%s", tc.args, diffLines(before, after))
		}
		cleanup() // the next row starts from the fleet as it was
	}
	t.Logf("%d bad inputs tried; exit codes, messages and the cluster checked", len(rows))
}

// bookkept drops from a snapshot what a refused run (exit 3) changes of its
// own: it took the Lease and wrote its start and refusal to the history.
// Bad input (exit 2) is refused before either.
func bookkept(snapshot string, code int) string {
	if code != cli.ExitBlocked {
		return snapshot
	}
	var keep []string
	for _, l := range strings.Split(snapshot, "\n") {
		if !strings.HasPrefix(l, "lease ") && !strings.HasPrefix(l, "configmap "+fleet.Namespace+"/rollbook-ate-history ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// diffLines lists the lines only one of a and b has.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for l := range ina {
		if !inb[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range inb {
		if !ina[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
