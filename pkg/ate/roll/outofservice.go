package roll

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// OthersDown refuses moving target while another node is already out of
// service: NotReady (notReady names those, with why) and not cordoned by
// someone else. The roll takes one node out of service at a time, and a
// node whose kubelet is down serves nothing whatever its workers' state
// says; moving a second would leave two out. A node a person cordoned is
// that person's repair, left out of the count (as the node picker leaves
// it to last). target "" is any node not begun yet. nil when none is.
func OthersDown(nodes []corev1.Node, notReady map[string]string, target string) error {
	var down []string
	for i := range nodes {
		n := &nodes[i]
		why, ok := notReady[n.Name]
		if !ok || n.Name == target || kube.CordonStateOf(n).Foreign() {
			continue
		}
		down = append(down, n.Name+" ("+why+")")
	}
	if len(down) == 0 {
		return nil
	}
	sort.Strings(down)
	what := "a node"
	if target != "" {
		what = target
	}
	return runbook.Blocked(fmt.Errorf("node(s) %s NotReady and so already out of service; moving %s now would take "+
		"another node out of service (one node at a time); nothing was changed. Bring the node back (its kubelet), "+
		"or, if it stays down for repair, cordon it (kubectl cordon NODE) so the roll leaves it to that work "+
		"and moves it last, then re-run", strings.Join(down, ", "), what))
}
