package tt

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/kube"
)

// CleanupAnnotations are the tt runbooks' records on nodes that no re-run
// needs once the node is not half-way (HalfWay): the last kmd and flash
// results and the last probe. Everything else tt writes on a node is
// either public (the version labels DaemonSets select on, the deploy
// gates, which are restored) or marks a node half-way.
var CleanupAnnotations = []string{AnnKMDResult, AnnFirmwareResult, AnnProbe}

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
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, kube.AnnotationPrefix+"tt-") && strings.HasSuffix(k, ".step-started") {
			why = append(why, fmt.Sprintf("step %s in progress", strings.SplitN(v, "@", 2)[0]))
		}
	}
	sort.Strings(why)
	return strings.Join(why, ", ")
}

// FinishHint says how to finish a half-way node.
const FinishHint = "Re-run the upgrade that started it (`kubectl tt status` names the step, `kubectl tt history NODE` the command), then clean up"
