package campaign

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
)

// CleanupAnnotations are the ate runbooks' records on nodes that no re-run
// needs once the node is not half-way: a residents list a move left when
// its moving-to mark is already gone, and the suspend pace measured (only
// later moves read it: without it, nothing is projected). The version label
// and the marks of a move in progress are not bookkeeping.
var CleanupAnnotations = []string{node.AnnResidents, node.AnnSuspendPace, roll.AnnImagePulls}

// HalfWay says, for every node that stands half-way in the node runbook
// either way, where: the Locator's verdict, the one roll next-node,
// rollback and status act on. It reads the cluster and the pools' pods;
// cleanup asks no control API, so the positions rest on the cluster alone
// (the node's marks, cordon and pool pods), as status's do with --no-api.
// A step clock is not a position: a clock a killed run left on a node the
// runbook shows done does not keep cleanup from it.
func HalfWay(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface) (map[string]string, error) {
	c, err := fleet.ObserveCluster(ctx, cs, dyn)
	if err != nil {
		return nil, err
	}
	pods, err := fleet.PoolPods(ctx, cs, c.Pools)
	if err != nil {
		return nil, err
	}
	return halfWay(c, pods), nil
}

// halfWay is HalfWay on what it read. Where the roll's shape is unknown
// no position can be decided: a node carrying a move's mark then counts as
// half-way, with the problems that keep it from being located.
func halfWay(c *fleet.Cluster, pods []corev1.Pod) map[string]string {
	out := map[string]string{}
	loc := node.NewLocator(c, pods, nil)
	for _, m := range loc.HalfMoved() {
		out[m.Node] = fmt.Sprintf("%s → %s, at step %s", m.From, m.To, m.Position)
	}
	for _, n := range loc.Unplaced() {
		out[n] = "it carries a move's mark, and where it stands cannot be decided: " + strings.Join(c.Problems, "; ")
	}
	return out
}

// FinishHint says how to finish a half-way node.
const FinishHint = "Finish the move first: `kubectl ate status` prints the exact next command " +
	"(`kubectl ate roll next-node`, or `kubectl ate rollback`), then clean up"
