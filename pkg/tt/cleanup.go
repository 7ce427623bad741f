package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// CleanupAnnotations are the tt runbooks' records on nodes that no re-run
// needs once the node is not half-way (HalfWay): the last kmd and flash
// results and the last probe. Everything else tt writes on a node is
// either public (the version labels DaemonSets select on, the deploy
// gates, which are restored) or marks a node half-way.
var CleanupAnnotations = []string{AnnKMDResult, AnnFirmwareResult, AnnSMIResult, AnnProbe}

// HalfWay says why node n is part-way through a tt runbook, or "": a
// cordon a tt runbook made, deploy gates it closed and has not restored,
// or a step clock (a timed step in progress).
func HalfWay(n *corev1.Node) string {
	var why []string
	if by := n.Annotations[kube.AnnCordonedBy]; strings.HasPrefix(by, "tt-") {
		why = append(why, "cordoned by "+by)
	}
	if _, ok := n.Annotations[AnnGatesPrior]; ok {
		why = append(why, "deploy gates closed ("+AnnGatesPrior+")")
	}
	for _, step := range runbook.StepsInProgress(n.Annotations, "tt-") {
		why = append(why, "step "+step+" in progress")
	}
	sort.Strings(why)
	return strings.Join(why, ", ")
}

// FinishHint says how to finish a half-way node.
const FinishHint = "Re-run the upgrade that started it (`kubectl tt status` names the step, " +
	"`kubectl tt history NODE` the command), then clean up"

// HostCacheNote is what a clean-cache helper removes, for the dry run.
var HostCacheNote = "host caches /" + strings.Join(nodeagent.HostCaches, ", /") + " (a clean-cache helper pod)"

// CleanHostCache runs a clean-cache helper on node, waits for it, deletes
// it and returns what it removed.
func CleanHostCache(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, h HelperConfig, node string) (string, error) {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	h.Timeout = timeout
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	s := CleanCacheSpec(h, node)
	pod, _, err := kube.EnsureHelper(ctx, cs, rec, s)
	if err != nil {
		return "", err
	}
	if pod, err = kube.WaitForHelper(ctx, cs, pod.Namespace, pod.Name); err != nil {
		return "", fmt.Errorf("clean-cache helper %s/%s: %w", s.Namespace, pod.Name, err)
	}
	msg, _, _ := kube.TerminationMessage(pod)
	r, perr := nodeagent.ParseResult([]byte(msg))
	switch {
	case perr != nil:
		// Kept, as any failed helper, for `kubectl tt logs NODE`.
		return "", fmt.Errorf("clean-cache helper %s/%s left no result (%s): %v", pod.Namespace, pod.Name,
			kube.HelperFailureReason(pod), perr)
	case !r.Success && r.Error != nil:
		return "", fmt.Errorf("clean-cache on %s: %s", node, r.Error.Message)
	}
	if _, err := kube.DeleteHelperIfUnchanged(ctx, cs, rec, pod, "deleted finished clean-cache helper"); err != nil {
		return "", err
	}
	detail := "done"
	if n := len(r.Steps); n > 0 {
		detail = r.Steps[n-1].Detail
	}
	return detail, nil
}
