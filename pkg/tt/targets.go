package tt

import (
	"context"

	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// LockName is the Lease every tt runbook takes: kmd and firmware work on
// the same nodes must never run at once.
const LockName = "rollbook-tt"

// KMDTargets returns the nodes a kmd or tt-smi upgrade acts on, in order,
// and the selected nodes it must skip with the reason.
func KMDTargets(ctx context.Context, cs kubernetes.Interface, sel Selection) ([]runbook.Target, []Skipped, error) {
	if err := CheckNoOperator(ctx, cs); err != nil {
		return nil, nil, err
	}
	nodes, err := ListNodes(ctx, cs, sel)
	if err != nil {
		return nil, nil, err
	}
	var targets []runbook.Target
	var skipped []Skipped
	for i := range nodes {
		if why := DriverSkipReason(&nodes[i]); why != "" {
			skipped = append(skipped, Skipped{Node: nodes[i].Name, Why: why})
			continue
		}
		targets = append(targets, runbook.NodeTarget{Client: cs, Node: nodes[i].Name})
	}
	return targets, skipped, nil
}
