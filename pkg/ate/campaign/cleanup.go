package campaign

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// CleanupAnnotations are the ate runbooks' records on nodes that no re-run
// needs once the node is not half-way: a residents list a move left when
// its moving-to mark is already gone, and the suspend pace measured (only
// later moves read it: without it, nothing is projected). The version label
// and the marks of a move in progress are not bookkeeping.
var CleanupAnnotations = []string{node.AnnResidents, node.AnnSuspendPace, roll.AnnImagePulls}

// HalfWay says why node n is part-way through an ate runbook, or "": a
// move begun (AnnMovingTo), a flip not yet verified (AnnVerifyPending),
// ate's cordon, or a step clock.
func HalfWay(n *corev1.Node) string {
	var why []string
	if v, ok := n.Annotations[fleet.AnnMovingTo]; ok {
		why = append(why, "moving to "+v+" ("+fleet.AnnMovingTo+")")
	}
	if v, ok := n.Annotations[fleet.AnnVerifyPending]; ok {
		why = append(why, "flipped to "+v+", not yet verified ("+fleet.AnnVerifyPending+")")
	}
	if by := n.Annotations[kube.AnnCordonedBy]; strings.HasPrefix(by, "ate-") {
		why = append(why, "cordoned by "+by)
	}
	for _, step := range runbook.StepsInProgress(n.Annotations, "ate-") {
		why = append(why, "step "+step+" in progress")
	}
	sort.Strings(why)
	return strings.Join(why, ", ")
}

// FinishHint says how to finish a half-way node.
const FinishHint = "Finish the move first: `kubectl ate status` prints the exact next command " +
	"(`kubectl ate roll next-node`, or `kubectl ate rollback`), then clean up"
