package tt

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func releaseNode(unschedulable bool, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: ann}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
}

func TestReleaseStepsDecideFromTheNodeAlone(t *testing.T) {
	rb := ReleaseRunbook(nil, nil)
	step := map[string]runbook.Step[ReleaseFacts]{}
	for _, s := range rb.Steps {
		step[s.ID] = s
	}
	ours := map[string]string{kube.AnnCordonedBy: KMDRunbookName, AnnGatesPrior: `{"g":null}`,
		runbook.TimerKey(KMDRunbookName): "tt.kmd.swap@2026-01-01T00:00:00Z", kube.AnnLeftCordoned: "run x stopped"}
	for _, tc := range []struct {
		name              string
		node              *corev1.Node
		gates, cordon, bk bool // done?
	}{
		{"abandoned kmd run", releaseNode(true, ours), false, false, false},
		{"foreign cordon", releaseNode(true, map[string]string{}), true, true, true},
		{"another tool's cordon owner", releaseNode(true, map[string]string{kube.AnnCordonedBy: "someone-else"}), true, true, true},
		{"clean node", releaseNode(false, nil), true, true, true},
		{"left note without our cordon", releaseNode(false, map[string]string{kube.AnnLeftCordoned: "x"}), true, true, false},
	} {
		f := ReleaseFacts{Node: tc.node}
		if d, _ := step["tt.release.gates"].Done(f); d != tc.gates {
			t.Errorf("%s: gates done %v, want %v", tc.name, d, tc.gates)
		}
		if d, _ := step["tt.release.uncordon"].Done(f); d != tc.cordon {
			t.Errorf("%s: uncordon done %v, want %v", tc.name, d, tc.cordon)
		}
		if d, _ := step["tt.release.annotations"].Done(f); d != tc.bk {
			t.Errorf("%s: bookkeeping done %v, want %v", tc.name, d, tc.bk)
		}
		if NeedsRelease(tc.node) == (tc.gates && tc.cordon && tc.bk) {
			t.Errorf("%s: NeedsRelease disagrees with the steps", tc.name)
		}
	}
	running := ReleaseFacts{Node: releaseNode(true, ours), Helpers: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "h",
		Namespace: "kube-system", Labels: map[string]string{kube.LabelHelper: "kmd"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}}}
	if ok, why := noHelperRunning.Check(running); ok || why == "" {
		t.Fatal("release must wait for a running helper")
	}
}
