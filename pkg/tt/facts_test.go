package tt

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A helper whose container never ran leaves the runtime's message, not the
// agent's result: the error must carry what the runtime said.
func TestHelperThatNeverStartedSaysWhy(t *testing.T) {
	p := renderedHelper(helperSpec(HelperConfig{Image: "img", Namespace: "rollbook-system"}, "probe", "n1", "k",
		agentCommand("probe"), false, "r1"), corev1.PodFailed,
		"sim: the helper runner cannot provide volume host\nsecond line")
	p.Status.ContainerStatuses[0].State.Terminated.ExitCode = 128
	p.Status.ContainerStatuses[0].State.Terminated.Reason = "StartError"
	h := helperOf(p)
	for _, want := range []string{"unreadable helper result", "exited 128 (StartError)", "cannot provide volume host"} {
		if !strings.Contains(h.ResultErr, want) {
			t.Errorf("ResultErr %q lacks %q", h.ResultErr, want)
		}
	}
	if strings.Contains(h.ResultErr, "second line") {
		t.Errorf("ResultErr %q carries more than the message's first line", h.ResultErr)
	}
}
