package tt

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// LockName is the Lease every tt runbook takes: kmd and firmware work on
// the same nodes must never run at once.
const LockName = "rollbook-tt"

// DriverTargets returns the nodes driver work (tt-kmd and tt-smi) acts on, in order,
// and the selected nodes it must skip with the reason.
func DriverTargets(ctx context.Context, cs kubernetes.Interface, sel Selection) ([]runbook.Target, []Skipped, error) {
	return targets(ctx, cs, sel, DriverSkipReason)
}

// FirmwareTargets returns the nodes a firmware flash acts on and the
// selected nodes it skips.
func FirmwareTargets(ctx context.Context, cs kubernetes.Interface, sel Selection) ([]runbook.Target, []Skipped, error) {
	return targets(ctx, cs, sel, FirmwareSkipReason)
}

// FirmwareSkipReason says why firmware work must not touch n ("" = eligible).
func FirmwareSkipReason(n *corev1.Node) string {
	if n.Labels[LabelFirmwareSkip] == "true" {
		return LabelFirmwareSkip + "=true"
	}
	return ""
}

// targets lists the selected nodes (refusing while the operator manages
// them) and splits off those skip names a reason for.
func targets(ctx context.Context, cs kubernetes.Interface, sel Selection, skip func(*corev1.Node) string) ([]runbook.Target, []Skipped,
	error) {
	if err := CheckNoOperator(ctx, cs); err != nil {
		return nil, nil, err
	}
	nodes, err := ListNodes(ctx, cs, sel)
	if err != nil {
		return nil, nil, err
	}
	var out []runbook.Target
	var skipped []Skipped
	if err := sel.checkAccess(nodes, skip); err != nil {
		return nil, nil, err
	}
	if err := sel.refuseNeedsPerson(ctx, cs, nodes, skip); err != nil {
		return nil, nil, err
	}
	if err := sel.checkBudgetLabels(nodes, skip); err != nil {
		return nil, nil, err
	}
	for i := range nodes {
		if why := skip(&nodes[i]); why != "" {
			skipped = append(skipped, Skipped{Node: nodes[i].Name, Why: why})
			continue
		}
		out = append(out, runbook.NodeTarget{Client: cs, Node: nodes[i].Name})
	}
	return out, skipped, nil
}
