package tthost

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func helperPod(containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "kube-system", UID: "u1", ResourceVersion: "42"}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "img/" + c})
	}
	return p
}

func TestRunningStatusListsEveryContainer(t *testing.T) {
	now := time.Now()
	st := runningStatus(helperPod("a", "b"), "", now)
	if st.Phase != corev1.PodRunning || st.StartTime == nil || st.HostIP != hostIP || st.PodIP != hostIP {
		t.Fatalf("status %+v", st)
	}
	if len(st.ContainerStatuses) != 2 || st.ContainerStatuses[1].Name != "b" || st.ContainerStatuses[1].State.Running == nil {
		t.Fatalf("container statuses %+v", st.ContainerStatuses)
	}
	ready := false
	for _, c := range st.Conditions {
		ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Fatal("no Ready=True condition")
	}
}

func TestFinalStatus(t *testing.T) {
	now := time.Now()
	pod := helperPod("a", "b")
	ok := []result{{name: "a", exitCode: 0, message: "done"}, {name: "b", exitCode: 0}}
	if st := finalStatus(pod, now, ok, false,
		now); st.Phase != corev1.PodSucceeded || st.ContainerStatuses[0].State.Terminated.Reason != "Completed" ||
		st.ContainerStatuses[0].State.Terminated.Message != "done" {
		t.Fatalf("success: %+v", st)
	}
	bad := []result{{name: "a", exitCode: 0}, {name: "b", exitCode: 3, message: "boom"}}
	st := finalStatus(pod, now, bad, false, now)
	if st.Phase != corev1.PodFailed || st.ContainerStatuses[1].State.Terminated.ExitCode != 3 ||
		st.ContainerStatuses[1].State.Terminated.Reason != "Error" {
		t.Fatalf("failure: %+v", st)
	}
	st = finalStatus(pod, now, []result{{name: "a", exitCode: exitKilled}, {name: "b", exitCode: exitKilled}}, true, now)
	if st.Phase != corev1.PodFailed || st.Reason != reasonDeadline || st.Message != messageDeadline {
		t.Fatalf("deadline: %+v", st)
	}
	st = refusedStatus(helperPod("a"), "SimNoTTHost", "no host", now)
	if st.Phase != corev1.PodFailed || st.Reason != "SimNoTTHost" || st.ContainerStatuses[0].State.Terminated.Reason != reasonStartError ||
		st.ContainerStatuses[0].State.Terminated.Message != "no host" {
		t.Fatalf("refused: %+v", st)
	}
}

func TestStatusPatchIsConditional(t *testing.T) {
	b, err := statusPatch("42", runningStatus(helperPod("a"), "", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Metadata struct{ ResourceVersion string }
		Status   corev1.PodStatus
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Metadata.ResourceVersion != "42" || m.Status.Phase != corev1.PodRunning {
		t.Fatalf("patch %s: %v", b, err)
	}
	if _, err := statusPatch("", corev1.PodStatus{}); err == nil {
		t.Fatal("unconditional patch allowed")
	}
}

// The kubelet keeps the last 4 KiB of the file, then cuts each container's
// message to its share of 12 KiB from the front.
func TestTerminationMessageTruncation(t *testing.T) {
	dir := t.TempDir()
	term := filepath.Join(dir, "term")
	body := strings.Repeat("a", 5000) + strings.Repeat("z", 4096)
	if err := os.WriteFile(term, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	msg := terminationMessage(term, "", false, false)
	if msg != strings.Repeat("z", 4096) {
		t.Fatalf("kept %d bytes starting %q", len(msg), msg[:5])
	}
	pod := helperPod("a", "b", "c", "d") // 12 KiB / 4 = 3 KiB each
	st := finalStatus(pod, time.Now(), []result{{name: "a", message: msg}, {name: "b"}, {name: "c"}, {name: "d"}}, false, time.Now())
	if got := st.ContainerStatuses[0].State.Terminated.Message; len(got) != 3072 {
		t.Fatalf("pod budget: %d bytes", len(got))
	}
	if terminationMessage(filepath.Join(dir, "missing"), "", false, false) != "" {
		t.Fatal("missing termination log must read as empty")
	}
}

func TestFallbackToLogsOnError(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var lines []string
	for i := 0; i < 100; i++ {
		lines = append(lines, "line")
	}
	if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := terminationMessage(filepath.Join(dir, "none"), out, true, true); strings.Count(got, "\n") != maxLogLines {
		t.Fatalf("fallback kept %d lines", strings.Count(got, "\n"))
	}
	if got := terminationMessage(filepath.Join(dir, "none"), out, true, false); got != "" {
		t.Fatal("fallback used for a successful container")
	}
}
