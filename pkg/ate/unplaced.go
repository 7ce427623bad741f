package ate

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// unplacedWorkerPods names the pods of the pools the move goes to (s.ToPools)
// whose lineage is short of free slots and that no node has taken, per pool,
// with the scheduler's reason. A wait for such a lineage's workers ends only
// once room is made for these pods on a node at s.To: the scheduler serves
// the oldest Pending pod first, so another pool's pods may take the room a
// deleted worker freed. "" when every such pod is placed.
func unplacedWorkerPods(ctx context.Context, cs kubernetes.Interface, s Sides, needs []Need) (string, error) {
	short := map[string]bool{}
	for _, n := range needs {
		if n.Actors > n.Free {
			short[n.Lineage] = true
		}
	}
	if len(short) == 0 {
		return "", nil
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: PoolLabel,
		FieldSelector: "spec.nodeName="})
	if err != nil {
		return "", fmt.Errorf("list unscheduled worker pods: %w", err)
	}
	to := map[string]bool{}
	for _, p := range s.ToPools {
		to[p.Key()] = true
	}
	count, reason := map[string]int{}, map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		key := p.Namespace + "/" + p.Labels[PoolLabel]
		if l := s.Lineage[key]; !to[key] || !short[l] && !short[""] || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
			continue
		}
		count[key]++
		if reason[key] == "" {
			reason[key] = unschedulableReason(p)
		}
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%d pod(s) of pool %s not scheduled (%s)", count[k], k, reason[k]))
	}
	return strings.Join(out, "; "), nil
}

// unschedulableReason is the scheduler's word on a Pending pod, without its
// account of preemption.
func unschedulableReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			m, _, _ := strings.Cut(c.Message, " preemption:")
			return strings.TrimSuffix(strings.TrimSpace(m), ".")
		}
	}
	return "not yet seen by the scheduler"
}
