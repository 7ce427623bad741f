package tt

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// Which of a node's pods are rollbook's helpers, what each says, and their
// removal once a step is done with them.

// helperNamed is the pod of pods that name gives for node, if any.
func helperNamed(pods []corev1.Pod, name func(node string) string, node string) helperFacts {
	if name == nil {
		return helperFacts{}
	}
	want := name(node)
	for i := range pods {
		if pods[i].Name == want {
			return helperOf(&pods[i])
		}
	}
	return helperFacts{}
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
		// A message that is not the agent's is most often the runtime's own
		// (a container that never started): show it, with the pod's reason.
		h.ResultErr = fmt.Sprintf("unreadable helper result (%s): %v; the message begins %q",
			kube.HelperFailureReason(p), err, firstLine(msg, 160))
		return h
	}
	h.Result = &r
	return h
}

// isHelper reports rollbook's own helper pods.
func isHelper(p *corev1.Pod) bool {
	_, ok := p.Labels[kube.LabelHelper]
	return ok
}

// active reports pods that still run or may still hold a device.
func active(p *corev1.Pod) bool { return !kube.PodTerminal(p) }

// removeOtherRunsProbes deletes probes that earlier (dead) runs left on the
// node, from the observed pods when the observation read them.
func (b builder) removeOtherRunsProbes(ctx context.Context, f Facts) error {
	if f.helpersRead {
		return kube.RemoveOtherRunsHelperPods(ctx, b.cs, b.rec, f.Helpers, "probe", b.run)
	}
	return kube.RemoveOtherRunsHelpers(ctx, b.cs, b.rec, b.helperNS, "probe", f.Node.Name, b.run)
}

// cleanupHelpers deletes the node's finished helpers of task, but the one
// just deleted.
func (b builder) cleanupHelpers(ctx context.Context, f Facts, task string, deleted types.UID) error {
	var err error
	if f.helpersRead {
		rest := make([]corev1.Pod, 0, len(f.Helpers))
		for _, p := range f.Helpers {
			if p.UID != deleted {
				rest = append(rest, p)
			}
		}
		_, err = kube.CleanupHelperPods(ctx, b.cs, b.rec, rest, task)
	} else {
		_, err = kube.CleanupHelpers(ctx, b.cs, b.rec, b.helperNS, task, f.Node.Name)
	}
	return err
}
