package fleet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func waitingPod(name, reason, msg string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{PoolLabel: "p-v2"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "ateom",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}}
}

// Only a pull that no wait can cure (no build for the node's platform)
// stops the verify at once; other pull failures are retried by the kubelet.
func TestWrongPlatformPodsNamesOnlyPlatformMismatches(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelArchStable: "amd64"}}}
	for _, c := range []struct {
		pod  corev1.Pod
		want bool
	}{
		{waitingPod("a", "ErrImagePull", `failed to pull and unpack image "x": no match for platform in manifest: not found`), true},
		{waitingPod("b", "ImagePullBackOff", `Back-off pulling image "x": no matching manifest for linux/amd64 in the manifest list entries`),
			true},
		{waitingPod("c", "ErrImagePull", `failed to pull and unpack image "x": not found`), false},
		{waitingPod("d", "ContainerCreating", ""), false},
	} {
		got := WrongPlatformPods([]corev1.Pod{c.pod}, node)
		if (got != "") != c.want {
			t.Errorf("%s: %q, want a stop: %v", c.pod.Name, got, c.want)
		}
		if c.want && (!strings.Contains(got, "ns/"+c.pod.Name+" of pool p-v2") || !strings.Contains(got, "kubernetes.io/arch=amd64") ||
			!strings.Contains(got, "kubectl edit workerpool -n ns p-v2")) {
			t.Errorf("%s: the stop lacks the pod, the node's architecture or the fix: %s", c.pod.Name, got)
		}
	}
}
