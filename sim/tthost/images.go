package tthost

import (
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentImageRepo is the node-agent image the sim's registry holds.
const AgentImageRepo = "ghcr.io/rollbook/node-agent"

// releaseTag is a tag rollbook's release could have pushed.
var releaseTag = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// KnownImage is the sim's registry: the node-agent repository at "latest"
// or a release tag. Anything else fails to pull, as a kubelet would report
// a wrong tag, a typo'd registry or a private image without credentials.
func KnownImage(ref string) bool {
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok || strings.Contains(tag, "/") {
		return false
	}
	return repo == AgentImageRepo && (tag == "latest" || releaseTag.MatchString(tag))
}

// pullBackoffAfter is how long a pod shows ErrImagePull before the kubelet
// moves it to ImagePullBackOff.
const pullBackoffAfter = 3 * time.Second

// pullFailedStatus is a kubelet's status for a pod whose image cannot be
// pulled: Pending, every unknown image's container waiting.
func pullFailedStatus(pod *corev1.Pod, reason string, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	st := baseStatus(t, corev1.PodPending)
	st.Conditions = conditions(t, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status")
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr(false)}
		if KnownImage(c.Image) {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		} else {
			msg := `Failed to pull image "` + c.Image + `": rpc error: code = NotFound desc = failed to pull and unpack image "` +
				c.Image + `": not found`
			if reason == "ImagePullBackOff" {
				msg = `Back-off pulling image "` + c.Image + `"`
			}
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	return st
}

// unknownImage returns the first container image the registry lacks.
func unknownImage(pod *corev1.Pod) (string, bool) {
	for _, c := range pod.Spec.Containers {
		if !KnownImage(c.Image) {
			return c.Image, true
		}
	}
	return "", false
}
