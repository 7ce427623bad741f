package tt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
)

// closeGates sets each gate label to "false" and records the previous
// values in the same patch. Values recorded by an earlier, interrupted run
// are kept: they, not our own "false", are the truth to restore.
func closeGates(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, cur *corev1.Node, gates []string) error {
	node := cur.Name
	reads := kube.NodeKeys{Labels: gates, Annotations: []string{AnnGatesPrior}}
	n, err := kube.UpdateNodeKeysFrom(ctx, cs, cur, reads, func(n *corev1.Node) (kube.NodeChange, error) {
		return closeGatesChange(n, gates)
	})
	if err != nil {
		return kube.RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "DeployGatesClosed", gatesClosedMessage(gates),
			func(n *corev1.Node) bool { return gatesClosed(n, gates) })
	}
	rec.Record(ctx, kube.NodeRef(n), false, "DeployGatesClosed", gatesClosedMessage(gates))
	return nil
}

// closeGatesChange is closeGates's write on n.
func closeGatesChange(n *corev1.Node, gates []string) (kube.NodeChange, error) {
	prior := map[string]*string{}
	if raw, ok := n.Annotations[AnnGatesPrior]; ok {
		if err := json.Unmarshal([]byte(raw), &prior); err != nil {
			return kube.NodeChange{}, fmt.Errorf("annotation %s on %s is not valid JSON: %v", AnnGatesPrior, n.Name, err)
		}
	}
	change := kube.NodeChange{Labels: map[string]*string{}}
	for _, g := range gates {
		if _, seen := prior[g]; !seen {
			if v, ok := n.Labels[g]; ok {
				prior[g] = &v
			} else {
				prior[g] = nil
			}
		}
		change.Labels[g] = ptr.To("false")
	}
	b, _ := json.Marshal(prior)
	change.Annotations = map[string]*string{AnnGatesPrior: ptr.To(string(b))}
	return change, nil
}

func gatesClosedMessage(gates []string) string {
	return fmt.Sprintf("set %s to \"false\" so DaemonSets holding the device leave", strings.Join(gates, ", "))
}

// firstOpenGate is the first of gates not at "false" on n, "" if none.
func firstOpenGate(n *corev1.Node, gates []string) string {
	for _, g := range gates {
		if n.Labels[g] != "false" {
			return g
		}
	}
	return ""
}

// gatesClosed reports every gate at "false" with the prior values recorded.
func gatesClosed(n *corev1.Node, gates []string) bool {
	_, recorded := n.Annotations[AnnGatesPrior]
	return firstOpenGate(n, gates) == "" && recorded
}

// openGates restores the recorded gate values and drops the record.
func openGates(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, cur *corev1.Node) error {
	node := cur.Name
	var restored []string
	reads := kube.NodeKeys{Annotations: []string{AnnGatesPrior}}
	n, err := kube.UpdateNodeKeysFrom(ctx, cs, cur, reads, func(n *corev1.Node) (kube.NodeChange, error) {
		var change kube.NodeChange
		var err error
		change, restored, err = openGatesChange(n)
		return change, err
	})
	if err != nil {
		return kube.RecordNodeWriteIfApplied(ctx, err, cs, rec, node, "DeployGatesOpened", gatesOpenedMessage(restored),
			func(n *corev1.Node) bool { return len(restored) > 0 && gatesOpened(n) })
	}
	if len(restored) > 0 {
		rec.Record(ctx, kube.NodeRef(n), false, "DeployGatesOpened", gatesOpenedMessage(restored))
	}
	return nil
}

// openGatesChange is openGates's write on n (none when no prior values are
// recorded), with what it restores, for the DeployGatesOpened Event.
func openGatesChange(n *corev1.Node) (kube.NodeChange, []string, error) {
	raw, ok := n.Annotations[AnnGatesPrior]
	if !ok {
		return kube.NodeChange{}, nil, nil
	}
	prior := map[string]*string{}
	if err := json.Unmarshal([]byte(raw), &prior); err != nil {
		return kube.NodeChange{}, nil, fmt.Errorf("annotation %s on %s is not valid JSON: %v", AnnGatesPrior, n.Name, err)
	}
	var restored []string
	change := kube.NodeChange{Labels: map[string]*string{}, Annotations: map[string]*string{AnnGatesPrior: nil}}
	for g, v := range prior {
		change.Labels[g] = v
		if v == nil {
			restored = append(restored, g+" removed")
		} else {
			restored = append(restored, g+"="+*v)
		}
	}
	return change, restored, nil
}

// gatesOpened reports no prior gate values held on n (a restore applied).
func gatesOpened(n *corev1.Node) bool { _, held := n.Annotations[AnnGatesPrior]; return !held }

func gatesOpenedMessage(restored []string) string { return "restored " + strings.Join(restored, ", ") }

func validateLabelKey(k string) string {
	return strings.Join(validation.IsQualifiedName(k), "; ")
}
