package roll

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Every combination of two other nodes' readiness and cordon: the move of
// the target is refused exactly when another node is NotReady without a
// person's cordon, and the refusal names each such node and no other.
func TestOthersDownRefusesExactlyWhileAnotherNodeIsOut(t *testing.T) {
	cordons := []string{"none", "person", "rollbook"}
	node := func(name, cordon string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
		switch cordon {
		case "person":
			n.Spec.Unschedulable = true
		case "rollbook":
			n.Spec.Unschedulable = true
			n.Annotations[kube.AnnCordonedBy] = "ate-node"
		}
		return n
	}
	for mask := range 1 << 3 { // target, a, b NotReady or not
		for _, ca := range cordons {
			for _, cb := range cordons {
				nodes := []corev1.Node{node("target", "none"), node("a", ca), node("b", cb)}
				notReady := map[string]string{}
				var want []string
				for i, n := range nodes {
					if mask&(1<<i) == 0 {
						continue
					}
					notReady[n.Name] = "kubelet stopped posting"
					if n.Name != "target" && !kube.CordonStateOf(&nodes[i]).Foreign() {
						want = append(want, n.Name)
					}
				}
				name := fmt.Sprintf("notReady=%03b a=%s b=%s", mask, ca, cb)
				err := OthersDown(nodes, notReady, "target")
				if (err != nil) != (len(want) > 0) {
					t.Errorf("%s: refused %v, want refused %v", name, err != nil, len(want) > 0)
					continue
				}
				if err == nil {
					continue
				}
				var blocked *runbook.BlockedError
				if !errors.As(err, &blocked) {
					t.Errorf("%s: %v is not a blocked error (exit 3)", name, err)
				}
				for _, n := range []string{"a", "b"} {
					named := strings.Contains(err.Error(), " "+n+" (")
					if named != strings.Contains(strings.Join(want, ","), n) {
						t.Errorf("%s: names %s %v in %q", name, n, named, err)
					}
				}
			}
		}
	}
}
