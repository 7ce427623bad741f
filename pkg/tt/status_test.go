package tt

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

func helperPod(task string, phase corev1.PodPhase, msg string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "h", Labels: map[string]string{kube.LabelHelper: task},
		Annotations: map[string]string{kube.AnnHelperKey: "2.8.0"}}, Status: corev1.PodStatus{Phase: phase}}
	if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}}}}
	}
	return p
}

// renderedHelper is the pod spec renders, in phase, with termination message msg.
func renderedHelper(spec kube.HelperSpec, phase corev1.PodPhase, msg string) *corev1.Pod {
	p := spec.Pod()
	p.Status.Phase = phase
	if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Message: msg}}}}
	}
	return p
}

func TestNodeStatusInference(t *testing.T) {
	failed, _ := nodeagent.EncodeResult(nodeagent.Result{Op: nodeagent.OpKMD, Error: &nodeagent.Failure{
		Reason: nodeagent.ReasonDeviceInUse, Message: "refcnt 1"}, Holders: []nodeagent.Holder{{PID: 42}}})
	cordoned := func(owner string) *corev1.Node {
		n := nodeWith(map[string]string{LabelKMDVersion: "2.7.0"}, map[string]string{})
		n.Spec.Unschedulable = true
		if owner != "" {
			n.Annotations[kube.AnnCordonedBy] = owner
		}
		return n
	}
	for _, tc := range []struct {
		name      string
		node      *corev1.Node
		helpers   []corev1.Pod
		state     string
		whyHas    string
		cordonWas string
	}{
		{"idle", nodeWith(map[string]string{LabelKMDVersion: "2.7.0"}, nil), nil, "idle", "", "-"},
		{"DKMS is skipped", nodeWith(map[string]string{LabelInstallMode: InstallModeHost}, nil), nil, "skipped", "DKMS", "-"},
		{"foreign cordon", cordoned(""), nil, "idle", "someone else", "foreign"},
		{"ours, step from the clock", func() *corev1.Node {
			n := cordoned(KMDRunbookName)
			n.Annotations["rollbook.dev/tt-kmd.step-started"] = "tt.kmd.drain@2026-11-30T10:00:00Z"
			return n
		}(), nil, "tt-kmd: tt.kmd.drain", "", KMDRunbookName},
		{"helper running", cordoned(KMDRunbookName), []corev1.Pod{helperPod("kmd", corev1.PodRunning, "")}, "kmd helper running (2.8.0)",
			"",
			KMDRunbookName},
		{"helper failed with holders", cordoned(KMDRunbookName), []corev1.Pod{helperPod("kmd", corev1.PodFailed, string(failed))},
			"tt-kmd: in progress", "DeviceInUse: refcnt 1 (holder pids 42)", KMDRunbookName},
		{"failed helper of an abandoned version", nodeWith(map[string]string{LabelKMDVersion: "2.9.0"}, map[string]string{
			AnnKMDResult: `{"after":"2.9.0","at":"2026-11-30T10:00:00Z"}`}), []corev1.Pod{helperPod("kmd", corev1.PodFailed,
			string(failed))},
			"idle", "", "-"},
		{"probe saw a host process", nodeWith(nil, map[string]string{AnnProbe: probeJSON(t, ProbeRecord{
			Holders: []nodeagent.Holder{{PID: 7777, Comm: "bench"}}})}), nil, "idle", "pid 7777 (bench)", "-"},
	} {
		r := nodeStatus(tc.node, tc.helpers)
		if r.State != tc.state || r.Cordon != tc.cordonWas || (tc.whyHas == "") != (r.Why == "") || !strings.Contains(r.Why, tc.whyHas) {
			t.Errorf("%s: state %q cordon %q why %q; want %q %q %q", tc.name, r.State, r.Cordon, r.Why, tc.state, tc.cordonWas, tc.whyHas)
		}
	}
}
