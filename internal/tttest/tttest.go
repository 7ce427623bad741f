// Package tttest holds what the kubectl-tt e2e test packages share: run the
// command tree against the package's simulated cluster.
package tttest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

// Run runs kubectl tt with args against the package's simulated cluster
// and returns its output (stdout then stderr) and exit code.
func Run(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	c := simtest.Get(t)
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	code := cli.ExecuteContext(ctx, ttcmd.NewRootCommand(streams), append(args, "--kubeconfig", c.Kubeconfig), errOut)
	all := out.String() + errOut.String()
	t.Logf("kubectl tt %s → exit %d\n%s", strings.Join(args, " "), code, all)
	return all, code
}

// Node is the node as the API server has it now.
func Node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := simtest.Get(t).Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// HostRoot is the simulated node's host root (the tt scenarios' fake hosts).
func HostRoot(t *testing.T, name string) string {
	return filepath.Join(simtest.Get(t).Dir, "hosts", name)
}

// Host is what the node's fake host shows now.
func Host(t *testing.T, name string) fakehost.Observed {
	t.Helper()
	o, err := fakehost.Inspect(HostRoot(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Reboot boots the node's fake host into kernel (fakehost.Reboot) and
// reports it as the cluster would see it: the kubelet's
// status.nodeInfo.kernelVersion and NFD's kernel-version.full label.
func Reboot(t *testing.T, ctx context.Context, name, kernel string) {
	t.Helper()
	if err := fakehost.Reboot(HostRoot(t, name), kernel, false); err != nil {
		t.Fatal(err)
	}
	cs := simtest.Get(t).Client
	status := fmt.Sprintf(`{"status":{"nodeInfo":{"kernelVersion":%q}}}`, kernel)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	label := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, tt.LabelNFDKernel, kernel)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(label), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// BlockedUncordoned runs kubectl tt with args and checks what every refusal
// before a node's cordon must give: exit 3 with each of want in the output,
// the node never cordoned (watched while the command runs), no note that it
// was left cordoned, and its host untouched (the same module loaded, no
// operation done). It returns the output.
func BlockedUncordoned(t *testing.T, ctx context.Context, node string, want []string, args ...string) string {
	t.Helper()
	before := Host(t, node).LoadedKMD
	ops, _ := fakehost.Ops(HostRoot(t, node))
	untouched := simtest.Get(t).NeverCordoned(t, ctx, node)
	out, code := Run(t, ctx, args...)
	if code != cli.ExitBlocked {
		t.Errorf("exit %d, want %d (blocked)", code, cli.ExitBlocked)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the output does not say %q", w)
		}
	}
	if !untouched() {
		t.Error("the node was cordoned")
	}
	n := Node(t, node)
	if n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] != "" {
		t.Errorf("after the run: unschedulable %v, left-cordoned %q", n.Spec.Unschedulable, n.Annotations[kube.AnnLeftCordoned])
	}
	if got := Host(t, node).LoadedKMD; got != before {
		t.Errorf("the host's module is %q, was %q", got, before)
	}
	if after, _ := fakehost.Ops(HostRoot(t, node)); len(after) != len(ops) {
		t.Errorf("the host changed: %v", after[len(ops):])
	}
	return out
}
