package kubewatch

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/sim/substrate"
)

// The contract's names (see the package comment).
const (
	AnnMaxOutOfService = "rollbook.dev/max-out-of-service"
	AnnCordonedBy      = "rollbook.dev/cordoned-by"
	AnnCordonRun       = "rollbook.dev/cordon-run"
	AnnLeftCordoned    = "rollbook.dev/left-cordoned"
	// AnnRecoveringNode on a held Lease, "RUN/NODE", names a node whose
	// drained worker pods run RUN replaces in place (the runbook's recovery
	// from draining the wrong node): the node keeps its version, so the pool
	// putting the pods right back is the point, not the mistake. RUN must be
	// the holder's (AnnHolderRun): a declaration left by a killed run does
	// not cover the next holder.
	AnnRecoveringNode = "rollbook.dev/recovering-node"
	AnnHolderRun      = "rollbook.dev/holder-run"
)

// recovering says whether a held Lease declares node under recovery.
func recovering(leases []*coordv1.Lease, node string, now time.Time) bool {
	for _, l := range leases {
		run, n, ok := strings.Cut(l.Annotations[AnnRecoveringNode], "/")
		if ok && node != "" && n == node && run != "" && run == l.Annotations[AnnHolderRun] && leaseHeld(l, now) {
			return true
		}
	}
	return false
}

// declaredNodes are the nodes held Leases declare under recovery.
func declaredNodes(leases []*coordv1.Lease, now time.Time) []string {
	var out []string
	for _, l := range leases {
		if _, n, ok := strings.Cut(l.Annotations[AnnRecoveringNode], "/"); ok && recovering(leases, n, now) {
			out = append(out, n)
		}
	}
	return out
}

// LeaseNames are the Leases rollbook's runs hold.
var LeaseNames = []string{"rollbook-tt", "rollbook-ate"}

// leaseHeld says whether a run holds l at now.
func leaseHeld(l *coordv1.Lease, now time.Time) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return false
	}
	if l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	var last time.Time
	switch {
	case l.Spec.RenewTime != nil:
		last = l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		last = l.Spec.AcquireTime.Time
	default:
		return true
	}
	return now.Before(last.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// allowance is the Lease's max-out-of-service, 1 unless a positive integer says otherwise.
func allowance(l *coordv1.Lease) int {
	n, err := strconv.Atoi(strings.TrimSpace(l.Annotations[AnnMaxOutOfService]))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// heldLeases returns the held ones among leases and their total allowance.
func heldLeases(leases []*coordv1.Lease, now time.Time) (held []string, allowed int) {
	for _, l := range leases {
		if leaseHeld(l, now) {
			held = append(held, fmt.Sprintf("%s/%s (max %d)", l.Namespace, l.Name, allowance(l)))
			allowed += allowance(l)
		}
	}
	sort.Strings(held)
	return held, allowed
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// foreignCordon: unschedulable, but not by a run.
func foreignCordon(n *corev1.Node) bool {
	return n.Spec.Unschedulable && n.Annotations[AnnCordonedBy] == ""
}

// outOfService: cordoned by a run, or NotReady and not foreign-cordoned.
func outOfService(n *corev1.Node) bool {
	return !foreignCordon(n) && (n.Spec.Unschedulable || !nodeReady(n))
}

// tooManyOut returns the nodes out of service and a non-empty detail when
// they are more than the held Leases allow. Without a held Lease nothing is
// checked.
func tooManyOut(nodes []*corev1.Node, leases []*coordv1.Lease, now time.Time) (out []string, detail string) {
	held, allowed := heldLeases(leases, now)
	if len(held) == 0 {
		return nil, ""
	}
	for _, n := range nodes {
		if outOfService(n) {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	if len(out) <= allowed {
		return out, ""
	}
	return out, fmt.Sprintf("%d nodes out of service (%s) while %s allow %d",
		len(out), strings.Join(out, ", "), strings.Join(held, ", "), allowed)
}

// cordonsLeft returns, per node, why it is cordoned by rollbook with no run
// in progress and no left-cordoned reason; empty while a Lease is held.
func cordonsLeft(nodes []*corev1.Node, leases []*coordv1.Lease, now time.Time) map[string]string {
	if held, _ := heldLeases(leases, now); len(held) > 0 {
		return nil
	}
	left := map[string]string{}
	for _, n := range nodes {
		by := n.Annotations[AnnCordonedBy]
		if !n.Spec.Unschedulable || by == "" || strings.TrimSpace(n.Annotations[AnnLeftCordoned]) != "" {
			continue
		}
		left[n.Name] = fmt.Sprintf("cordoned by %s (run %q) with no rollbook run holding a Lease and no %s reason",
			by, n.Annotations[AnnCordonRun], AnnLeftCordoned)
	}
	return left
}

// pin is the substrate version a worker pod is pinned to ("" = unpinned).
func pin(p *corev1.Pod) string { return p.Spec.NodeSelector[substrate.VersionLabel] }

// ateletVersion is an atelet pod's version: its version label, else its image tag.
func ateletVersion(p *corev1.Pod) string {
	if v := p.Labels[substrate.VersionLabel]; v != "" {
		return v
	}
	for _, c := range p.Spec.Containers {
		if i := strings.LastIndex(c.Image, ":"); i >= 0 && !strings.Contains(c.Image[i:], "/") {
			return c.Image[i+1:]
		}
	}
	return ""
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.NodeName != ""
}

// skews returns, keyed "<worker ns/name> <atelet ns/name>", each Running
// worker pod pinned to a version next to a Running, not Terminating, atelet of
// another version.
func skews(workers, atelets []*corev1.Pod) map[string]string {
	byNode := map[string][]*corev1.Pod{}
	for _, a := range atelets {
		// A Terminating atelet is leaving (the flip's hand-off: it drains
		// while the new version's workers start): it serves nothing new.
		if a.Status.Phase == corev1.PodRunning && a.Spec.NodeName != "" && a.DeletionTimestamp == nil {
			byNode[a.Spec.NodeName] = append(byNode[a.Spec.NodeName], a)
		}
	}
	out := map[string]string{}
	for _, w := range workers {
		v := pin(w)
		if v == "" || !running(w) {
			continue
		}
		for _, a := range byNode[w.Spec.NodeName] {
			if av := ateletVersion(a); av != v {
				key := w.Namespace + "/" + w.Name + " " + a.Namespace + "/" + a.Name
				out[key] = fmt.Sprintf("worker pod %s/%s (pool %s, pinned to %s) Running on node %s next to atelet %s/%s at %s",
					w.Namespace, w.Name, w.Labels[substrate.PoolLabel], v, w.Spec.NodeName, a.Namespace, a.Name, av)
			}
		}
	}
	return out
}

// oldPodDeleted decides a worker pod's deletion: node is the pod's node
// (nil when gone), rs its owning ReplicaSet (nil when gone) and live the
// number of that ReplicaSet's pods not being deleted, p included. It returns
// a non-empty detail for a violation.
func oldPodDeleted(p *corev1.Pod, node *corev1.Node, rs *appsv1.ReplicaSet, live int) string {
	v := pin(p)
	if v == "" || p.Spec.NodeName == "" || node == nil || node.DeletionTimestamp != nil || !nodeReady(node) {
		return "" // unpinned, never placed, or the node is going away: not a run's act
	}
	if node.Labels[substrate.VersionLabel] != v {
		return "" // flipped first: the runbook's order
	}
	if node.Spec.Unschedulable {
		return "" // cordoned: the pool cannot put it back there
	}
	if rs == nil || rs.DeletionTimestamp != nil || (rs.Spec.Replicas != nil && int(*rs.Spec.Replicas) < live) {
		return "" // the controller removes it: a pool deletion or scale-down
	}
	return fmt.Sprintf("worker pod of pool %s pinned to %s deleted while node %s still carries %s=%s: the old pool can put it right back",
		p.Labels[substrate.PoolLabel], v, node.Name, substrate.VersionLabel, v)
}

// owningReplicaSet is the name of p's controller ReplicaSet, "" if none.
func owningReplicaSet(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Kind == "ReplicaSet" && o.Controller != nil && *o.Controller {
			return o.Name
		}
	}
	return ""
}

// pool is what the rules read of a WorkerPool.
type pool struct {
	Namespace, Name string
	Generation      int64
	Replicas        int64
	Deleting        bool
}

// serving says whether pool has a Running worker pod on a node of its pin;
// pods are the pool's own, nodes by name.
func serving(pods []*corev1.Pod, nodes map[string]*corev1.Node) bool {
	for _, p := range pods {
		if !running(p) {
			continue
		}
		n := nodes[p.Spec.NodeName]
		if v := pin(p); v == "" || (n != nil && n.Labels[substrate.VersionLabel] == v) {
			return true
		}
	}
	return false
}

// poolChange returns a non-empty detail when the change from old to cur
// (cur nil: deleted) touches a serving pool.
func poolChange(old, cur *pool, isServing bool) string {
	if !isServing {
		return ""
	}
	switch {
	case cur == nil || (cur.Deleting && !old.Deleting):
		return "deleted while serving"
	case cur.Replicas < old.Replicas:
		return fmt.Sprintf("scaled down from %d to %d replicas while serving", old.Replicas, cur.Replicas)
	case cur.Generation > old.Generation:
		return fmt.Sprintf("spec edited while serving (generation %d → %d)", old.Generation, cur.Generation)
	}
	return ""
}

// episodes reports a condition once it has held for a grace period, once per
// continuous episode.
type episodes struct {
	since    map[string]time.Time
	reported map[string]bool
}

func newEpisodes() *episodes {
	return &episodes{since: map[string]time.Time{}, reported: map[string]bool{}}
}

// observe takes the keys true at now and returns those that have been true
// for at least grace and not reported yet in this episode.
func (e *episodes) observe(now time.Time, keys map[string]string, grace time.Duration) []string {
	for k := range e.since {
		if _, ok := keys[k]; !ok {
			delete(e.since, k)
			delete(e.reported, k)
		}
	}
	var due []string
	for k := range keys {
		s, ok := e.since[k]
		if !ok {
			s = now
			e.since[k] = now
		}
		if !e.reported[k] && now.Sub(s) >= grace {
			e.reported[k] = true
			due = append(due, k)
		}
	}
	sort.Strings(due)
	return due
}

// reopen forgets k's episode: a fresh read showed it false, so a stale
// cache's view is not counted.
func (e *episodes) reopen(k string) {
	delete(e.since, k)
	delete(e.reported, k)
}
