package tt

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// helperFacts is a node's helper pod for one (task, version), if any, and
// the result it reported.
type helperFacts struct {
	Pod    *corev1.Pod
	Result *nodeagent.Result
	// ResultErr says why a finished helper's result could not be read.
	ResultErr string
}

// finished reports a helper that ended (either way).
func (h helperFacts) finished() bool { return h.Pod != nil && kube.PodTerminal(h.Pod) }

// succeeded reports a helper whose measured result reached want.
func (h helperFacts) succeeded(want string) bool {
	return h.finished() && h.Result != nil && h.Result.Success && h.Result.After == want
}

func observeHelper(ctx context.Context, cs kubernetes.Interface, ns, name string) (helperFacts, error) {
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return helperFacts{}, nil
	}
	if err != nil {
		return helperFacts{}, err
	}
	return helperOf(p), nil
}

// helperOf reads a helper pod's result from its status.
func helperOf(p *corev1.Pod) helperFacts {
	h := helperFacts{Pod: p}
	if !kube.PodTerminal(p) {
		return h
	}
	msg, _, ok := kube.TerminationMessage(p)
	if !ok || strings.TrimSpace(msg) == "" {
		h.ResultErr = "the helper left no result: " + kube.HelperFailureReason(p)
		return h
	}
	r, err := nodeagent.ParseResult([]byte(msg))
	if err != nil {
		h.ResultErr = "unreadable helper result: " + err.Error()
		return h
	}
	h.Result = &r
	return h
}

// mountsDevice reports pods that mount a hostPath under /dev/tenstorrent
// (and so hold the kernel module open).
func mountsDevice(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if hp := v.HostPath; hp != nil {
			path := strings.TrimRight(hp.Path, "/")
			if path == DevicePathPrefix || strings.HasPrefix(path, DevicePathPrefix+"/") || path == "/dev" {
				return true
			}
		}
	}
	return false
}

// isHelper reports rollbook's own helper pods.
func isHelper(p *corev1.Pod) bool {
	_, ok := p.Labels[kube.LabelHelper]
	return ok
}

// active reports pods that still run or may still hold a device.
func active(p *corev1.Pod) bool { return !kube.PodTerminal(p) }
