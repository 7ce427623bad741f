package node

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// waitForCapacity polls the substrate (it has no watch) through o until the
// node's actors have enough free workers of their pool lineage elsewhere,
// or the node is already drained; the observation that ends the wait is the
// node runbook's first (it changed nothing).
func waitForCapacity(ctx context.Context, o *nodeObserver, node string, limit time.Duration, say func(string, ...any)) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, limit, true, func(ctx context.Context) (bool, error) {
		f, err := o.look(ctx, node)
		if err != nil {
			return false, err
		}
		if !f.takingBack() && (f.flipped() || f.drained()) {
			o.saw(f)
			return true, nil // the drain step is done: its guard no longer applies
		}
		needs, ok := f.capacity()
		if !ok {
			d := fleet.DescribeNeeds(needs)
			if u, err := unplacedWorkerPods(ctx, o.cs, f.cfg.Sides, needs); err != nil {
				return false, err
			} else if u != "" {
				d += "; " + u + ": they register as workers once a node at " + f.cfg.To + " has room for them"
			}
			if d != last {
				say("waiting for free workers before draining %s: %s", node, d)
				last = d
			}
		}
		if ok {
			o.saw(f)
		}
		return ok, nil
	})
	if err != nil && ctx.Err() == nil {
		return runbook.Blocked(fmt.Errorf("not enough free workers for the actors on %s within %s (%s)", node, limit, last))
	}
	return err
}

// unplacedWorkerPods names the pods of the pools the move goes to (s.ToPools)
// whose lineage is short of free slots and that no node has taken, per pool,
// with the scheduler's reason. A wait for such a lineage's workers ends only
// once room is made for these pods on a node at s.To: the scheduler serves
// the oldest Pending pod first, so another pool's pods may take the room a
// deleted worker freed. "" when every such pod is placed.
func unplacedWorkerPods(ctx context.Context, cs kubernetes.Interface, s Sides, needs []fleet.Need) (string, error) {
	short := map[string]bool{}
	for _, n := range needs {
		if n.Actors > n.Free {
			short[n.Lineage] = true
		}
	}
	if len(short) == 0 {
		return "", nil
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel,
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
		key := p.Namespace + "/" + p.Labels[fleet.PoolLabel]
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
