package tt

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// The writes below each do in one patch what two or three steps in a row
// write, so that the later steps observe done and send nothing: a node's
// way through a roll is a chain of writes, each paid for with a request
// and the observation of it (docs/performance.md, "A fleet in kernel
// groups"). The steps stay as they are: their Done checks decide, and a
// re-run after an interruption anywhere acts on what is not done yet. Each
// step's Event is recorded as when it wrote alone.

// cordonClosingGates is the cordon step's write: owner's cordon
// (kube.CordonChange) and, in the same patch, the deploy gates closed
// (closeGatesChange), which the close-gates step after it would write
// next. Gates whose prior record cannot be read are left to that step,
// which fails on it as it always did.
func cordonClosingGates(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, cur *corev1.Node, owner, run string,
	gates []string) error {
	// The precondition is what the change was decided from: a write to
	// anything else in between costs no conflict and second patch.
	reads := &kube.NodeKeys{Labels: gates, Annotations: []string{AnnGatesPrior, kube.AnnCordonedBy}, Unschedulable: true}
	_, err := kube.UpdateNodeRecorded(ctx, cs, rec, cur, reads, func(n *corev1.Node) (kube.NodeChange, []kube.NodeRecord) {
		change, did := kube.CordonChange(n, owner, run)
		if !did {
			return change, nil
		}
		records := []kube.NodeRecord{{Reason: "Cordoned", Message: kube.CordonedMessage(owner, run)}}
		if len(gates) > 0 {
			if g, err := closeGatesChange(n, gates); err == nil {
				change = change.With(g)
				records = append(records, kube.NodeRecord{Reason: "DeployGatesClosed", Message: gatesClosedMessage(gates)})
			}
		}
		return change, records
	})
	if err != nil {
		return fmt.Errorf("cordon %s: %w", cur.Name, err)
	}
	return nil
}

// giveBack writes a runbook's measured result (result, recorded as Event
// reason with message; reason "" records none) and, in the same patch when
// the node is finished once the result is in (finished), what the steps
// after it would write: the deploy gates' recorded values restored
// (openGatesChange), then owner's cordon lifted with uncordon's ownership
// rules (kube.UncordonChange: only owner's cordon, its annotations
// removed). A node the result does not finish, or whose gates record cannot
// be read, gets the result alone, and those steps act (or fail) as always.
func giveBack(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, cur *corev1.Node, owner string,
	result kube.NodeChange, reason, message string, finished func(*corev1.Node) bool) error {
	// The precondition is what the change was decided from (the gates'
	// record, the cordon, the probe finished may read), not the whole node:
	// the step clock written since the last observation costs no conflict.
	reads := &kube.NodeKeys{Annotations: []string{AnnGatesPrior, kube.AnnCordonedBy, AnnProbe}, Unschedulable: true}
	_, err := kube.UpdateNodeRecorded(ctx, cs, rec, cur, reads, func(n *corev1.Node) (kube.NodeChange, []kube.NodeRecord) {
		var records []kube.NodeRecord
		if reason != "" {
			records = append(records, kube.NodeRecord{Reason: reason, Message: message})
		}
		if !finished(result.AppliedTo(n)) {
			return result, records
		}
		gates, restored, err := openGatesChange(n)
		if err != nil {
			return result, records
		}
		if len(restored) > 0 {
			records = append(records, kube.NodeRecord{Reason: "DeployGatesOpened", Message: gatesOpenedMessage(restored)})
		}
		lift, did := kube.UncordonChange(n, owner)
		if did {
			records = append(records, kube.NodeRecord{Reason: "Uncordoned", Message: kube.UncordonedMessage(owner)})
		}
		return result.With(gates).With(lift), records
	})
	return err
}
