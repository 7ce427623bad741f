package tt

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
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

// A node rebooted into a kernel its module was never built for needs
// work, whatever its label says, and status names the command that fixes
// it; a kernel it was built for, or no report of the kernel, is fine.
func TestNodeStatusKernelWithoutModule(t *testing.T) {
	rec := `{"after":"2.8.0","kernel":"5.15.0-91-generic","kernels":["5.15.0-91-generic","6.8.0-50-generic"],"persisted":true,` +
		`"at":"2026-11-30T10:00:00Z","run":"r1"}`
	for _, tc := range []struct {
		name, kernel, state, whyHas string
	}{
		{"the running kernel", "5.15.0-91-generic", "idle", ""},
		{"another kernel built for", "6.8.0-50-generic", "idle", ""},
		{"a kernel installed after the roll", "6.8.0-60-generic", "needs work",
			"runs kernel 6.8.0-60-generic (NFD label " + LabelNFDKernel + "), which tt-kmd 2.8.0 was never built for " +
				"(it boots with it on 5.15.0-91-generic, 6.8.0-50-generic only): the driver is likely not loaded and the label is " +
				"stale; fix: kubectl tt upgrade kmd --version 2.8.0 --nodes n1"},
		{"kernel not reported", "", "idle", ""},
	} {
		labels := map[string]string{LabelKMDVersion: "2.8.0"}
		if tc.kernel != "" {
			labels[LabelNFDKernel] = tc.kernel
		}
		n := nodeWith(labels, map[string]string{AnnKMDResult: rec})
		r := nodeStatus(n, nil)
		if r.State != tc.state || (tc.whyHas == "") != (r.Why == "") || !strings.Contains(r.Why, tc.whyHas) {
			t.Errorf("%s: state %q why %q; want %q %q", tc.name, r.State, r.Why, tc.state, tc.whyHas)
		}
	}
	old := nodeWith(map[string]string{LabelNFDKernel: "6.8.0-60-generic"}, map[string]string{
		AnnKMDResult: `{"after":"2.7.0","kernel":"5.15.0-91-generic","persisted":true,"at":"2026-11-30T10:00:00Z"}`})
	if r := nodeStatus(old, nil); r.State != "needs work" || !strings.Contains(r.Why, "on 5.15.0-91-generic only") {
		t.Errorf("a record from before every kernel was built for: state %q why %q", r.State, r.Why)
	}
}

// Status reads a node's pods and the PDBs only for a drain that stalled: a
// roll's nodes draining on schedule cost it nothing.
func TestDrainStalled(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339) }
	node := func(owner, cordonedAgo string, clock string) *corev1.Node {
		n := nodeWith(map[string]string{}, map[string]string{})
		n.Spec.Unschedulable = true
		if owner != "" {
			n.Annotations[kube.AnnCordonedBy] = owner
		}
		if cordonedAgo != "" {
			n.Annotations[kube.AnnCordonedAt] = cordonedAgo
		}
		if clock != "" {
			n.Annotations[runbook.TimerKey(owner)] = "tt.kmd.evict-device-pods@" + clock
		}
		return n
	}
	task := func(created time.Duration) corev1.Pod {
		p := helperPod("kmd", corev1.PodSucceeded, "")
		p.CreationTimestamp = metav1.NewTime(now.Add(-created))
		return p
	}
	probe := helperPod("probe", corev1.PodSucceeded, "")
	probe.CreationTimestamp = metav1.NewTime(now.Add(-time.Second))
	for _, c := range []struct {
		name    string
		n       *corev1.Node
		helpers []corev1.Pod
		want    bool
	}{
		{"draining for 3 s on its step clock", node(KMDRunbookName, at(4*time.Second), at(3*time.Second)), nil, false},
		{"draining for 12 s on its step clock", node(KMDRunbookName, at(13*time.Second), at(12*time.Second)), nil, true},
		{"cordoned 2 s ago, no clock yet", node(KMDRunbookName, at(2*time.Second), ""), nil, false},
		{"cordoned 30 s ago, no clock (the run stopped)", node(KMDRunbookName, at(30*time.Second), ""), nil, true},
		{"a probe after the cordon does not end the drain", node(KMDRunbookName, at(30*time.Second), ""), []corev1.Pod{probe}, true},
		{"a task helper created after the cordon: past the drain", node(KMDRunbookName, at(30*time.Second), ""),
			[]corev1.Pod{task(5 * time.Second)}, false},
		{"a task helper from before the cordon does not count", node(KMDRunbookName, at(30*time.Second), ""),
			[]corev1.Pod{task(time.Hour)}, true},
		{"cordoned by someone else", node("", at(time.Hour), ""), nil, false},
		{"cordoned by another rollbook plugin", node("ate", at(time.Hour), ""), nil, false},
	} {
		if got := drainStalled(c.n, c.helpers, now); got != c.want {
			t.Errorf("%s: drainStalled = %v, want %v", c.name, got, c.want)
		}
	}
}
