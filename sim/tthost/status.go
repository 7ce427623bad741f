package tthost

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hostIP is every fake node's address; helpers run with the host network
// of the sim, so the pod IP is the same.
const hostIP = "127.0.0.1"

// Kubelet vocabulary for deadline kills and start failures.
const (
	reasonDeadline   = "DeadlineExceeded"
	messageDeadline  = "Pod was active on the node longer than the specified deadline"
	reasonStartError = "StartError"
	exitStartError   = 128
)

// result is how one container ended.
type result struct {
	name, image       string
	imageID           string // the image it ran, by digest, as a kubelet reports it
	exitCode          int32
	message           string
	startErr          string // set when the process never started
	started, finished time.Time
}

// runningStatus is the status a kubelet reports once every container of
// pod has started from the image imageID (by digest). Every container is
// listed: a JSON merge patch replaces the whole list (H3).
func runningStatus(pod *corev1.Pod, imageID string, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	st := baseStatus(t, corev1.PodRunning)
	st.Conditions = conditions(t, corev1.ConditionTrue, "", "")
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID, Ready: true, Started: ptr(true),
			ContainerID: "containerd://" + containerID(string(pod.UID), c.Name),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return st
}

// finalStatus is the terminal status for pod given its containers'
// results (spec order); deadline marks a kill by activeDeadlineSeconds.
func finalStatus(pod *corev1.Pod, started time.Time, res []result, deadline bool, now time.Time) corev1.PodStatus {
	phase := corev1.PodSucceeded
	var failed []string
	for _, r := range res {
		if r.exitCode != 0 {
			phase = corev1.PodFailed
			failed = append(failed, r.name)
		}
	}
	if deadline {
		phase = corev1.PodFailed
	}
	t := metav1.NewTime(now)
	st := baseStatus(metav1.NewTime(started), phase)
	if deadline {
		st.Reason, st.Message = reasonDeadline, messageDeadline
	}
	reason, msg := "PodCompleted", ""
	if phase == corev1.PodFailed {
		reason = "PodFailed"
		if len(failed) > 0 {
			msg = "containers with unready status: [" + strings.Join(failed, " ") + "]"
		}
	}
	st.Conditions = conditions(t, corev1.ConditionFalse, reason, msg)
	budget := podMessageBudget(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
	for _, r := range res {
		term := &corev1.ContainerStateTerminated{
			ExitCode:    r.exitCode,
			Reason:      "Completed",
			Message:     cutMessage(r.message, budget),
			StartedAt:   metav1.NewTime(r.started),
			FinishedAt:  metav1.NewTime(r.finished),
			ContainerID: "containerd://" + containerID(string(pod.UID), r.name),
		}
		switch {
		case r.startErr != "":
			term.Reason, term.Message, term.ContainerID = reasonStartError, cutMessage(r.startErr, budget), ""
		case r.exitCode != 0:
			term.Reason = "Error"
		}
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: r.name, Image: r.image, ImageID: r.imageID, Ready: false, Started: ptr(false), ContainerID: term.ContainerID,
			State: corev1.ContainerState{Terminated: term},
		})
	}
	return st
}

// refusedStatus fails pod before anything ran, e.g. on a node without a
// host root or with a command the sim cannot run. Each container is
// reported as a start error carrying why.
func refusedStatus(pod *corev1.Pod, reason, why string, now time.Time) corev1.PodStatus {
	res := make([]result, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		res = append(res, result{name: c.Name, image: c.Image, exitCode: exitStartError, startErr: why, started: now, finished: now})
	}
	st := finalStatus(pod, now, res, false, now)
	st.Reason, st.Message = reason, why
	return st
}

// rejectedStatus is a kubelet's admission rejection (e.g. NodeAffinity):
// Failed with the reason, before any container was created, so there is
// no container status and no termination message.
func rejectedStatus(reason, why string, now time.Time) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: why, StartTime: &metav1.Time{Time: now}}
}

func baseStatus(start metav1.Time, phase corev1.PodPhase) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:     phase,
		StartTime: &start,
		HostIP:    hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}},
		PodIP: hostIP, PodIPs: []corev1.PodIP{{IP: hostIP}},
	}
}

// conditions lists every pod condition a kubelet maintains; ready gives
// Ready/ContainersReady, with reason and message when not ready.
func conditions(t metav1.Time, ready corev1.ConditionStatus, reason, msg string) []corev1.PodCondition {
	c := func(typ corev1.PodConditionType, s corev1.ConditionStatus, reason, msg string) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: s, LastTransitionTime: t, Reason: reason, Message: msg}
	}
	initReason := ""
	if reason == "PodCompleted" {
		initReason = reason
	}
	return []corev1.PodCondition{
		c(corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", ""),
		c(corev1.PodInitialized, corev1.ConditionTrue, initReason, ""),
		c(corev1.PodReady, ready, reason, msg),
		c(corev1.ContainersReady, ready, reason, msg),
		c(corev1.PodScheduled, corev1.ConditionTrue, "", ""),
	}
}

// statusPatch is a JSON merge patch of pod's status that only applies to
// the resourceVersion it was computed from: a pod that changed meanwhile
// (e.g. finished, H1) makes it fail with a conflict instead of being
// overwritten.
func statusPatch(resourceVersion string, st corev1.PodStatus) ([]byte, error) {
	if resourceVersion == "" {
		return nil, fmt.Errorf("status patch without a resourceVersion")
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"status":   st,
	})
}

func ptr[T any](v T) *T { return &v }
