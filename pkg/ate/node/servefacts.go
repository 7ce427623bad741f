package node

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/kube"
)

func (f nodeFacts) hasAteletPods() bool {
	for _, p := range f.pods {
		if p.Labels[fleet.AppLabel] == fleet.AteletApp {
			return true
		}
	}
	return false
}

// ateletReadyOf: a Ready atelet of version runs on the node (a Terminating
// one serves nothing).
func (f nodeFacts) ateletReadyOf(version string) bool {
	for _, p := range f.pods {
		if p.Labels[fleet.AppLabel] == fleet.AteletApp && p.Labels[fleet.VersionLabel] == version && p.DeletionTimestamp == nil &&
			kube.PodReady(&p) {
			return true
		}
	}
	return false
}

// ateletReady says whether the target version's atelet on the node is
// Ready, and else what it waits on: the new pod stays Pending (unscheduled,
// so not on the node yet) while another atelet pod there still holds the
// node's host ports.
func (f nodeFacts) ateletReady() (bool, string) {
	var mine *corev1.Pod
	var holders []string
	for i, p := range f.pods {
		if p.Labels[fleet.AppLabel] != fleet.AteletApp {
			continue
		}
		if p.Labels[fleet.VersionLabel] == f.cfg.To && p.DeletionTimestamp == nil {
			if kube.PodReady(&p) {
				return true, "atelet " + p.Name + " Ready"
			}
			mine = &f.pods[i]
			continue
		}
		h := p.Name + " (" + p.Labels[fleet.VersionLabel]
		if p.DeletionTimestamp != nil {
			h += ", Terminating, deleted at " + p.DeletionTimestamp.Add(-gracePeriod(p)).UTC().Format(time.RFC3339)
		}
		holders = append(holders, h+")")
	}
	why := "no atelet for " + f.cfg.To + " on the node yet"
	if mine != nil {
		why = "atelet " + mine.Name + " is " + string(mine.Status.Phase)
	}
	if len(holders) > 0 {
		why += "; atelet pod " + strings.Join(holders, ", ") + " still holds the node's host ports (8085, 9090): the " +
			f.cfg.To + " atelet stays Pending until it has exited"
	}
	return false, why
}

// gracePeriod is the grace the pod's deletion was given: its
// deletionTimestamp minus this is when the deletion was asked for.
func gracePeriod(p corev1.Pod) time.Duration {
	if g := p.DeletionGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 0
}

// toPodsReady counts the target pools' pods on the node and the Ready ones.
func (f nodeFacts) toPodsReady() (ready, total int) {
	for _, p := range f.podsOf(f.cfg.ToPools) {
		if p.DeletionTimestamp != nil {
			continue // being deleted: not a worker the node will serve with (its Deployment replaces it)
		}
		total++
		if kube.PodReady(&p) {
			ready++
		}
	}
	return ready, total
}

// toPodsNotReady names the target pools' pods on the node that are not
// Ready, with what their status says, so a wait that runs out of budget
// says which pod to look at.
func (f nodeFacts) toPodsNotReady() []string {
	var out []string
	for _, p := range f.podsOf(f.cfg.ToPools) {
		if p.DeletionTimestamp != nil || kube.PodReady(&p) {
			continue
		}
		why := string(p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady || (c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue) {
				why += fmt.Sprintf(", %s=%s", c.Type, c.Status)
				if c.Reason != "" {
					why += " " + c.Reason
				}
			}
		}
		if pull, _ := fleet.PullFailure(&p); pull != "" {
			why += ", " + pull
		}
		out = append(out, p.Namespace+"/"+p.Name+" ("+why+")")
	}
	return out
}

// toMustServeHere reports that the target pools want workers but none is
// ACTIVE on another node (the canary, or every earlier one lost its own):
// the node has moved only once one serves here, or the roll would go on
// with the target version serving nowhere.
func (f nodeFacts) toMustServeHere() bool {
	var desired int64
	for _, p := range f.cfg.ToPools {
		desired += p.Desired
	}
	if desired == 0 {
		return false
	}
	to := fleet.PoolSet(f.cfg.ToPools)
	for _, w := range f.inv.Workers {
		if to[w.PoolKey()] && w.Serving() && w.Node != f.node.Name {
			return false
		}
	}
	return true
}

// unservedLineages are the pool lineages (a serving pool and its clone)
// that want workers but have none serving anywhere once this node has
// moved (its workers of the pools it left do not count): their actors
// would have nowhere to resume, whatever this node shows. A clone whose
// pods a ResourceQuota, a taint or an image of another architecture keeps
// from running leaves its lineage so after the last node.
func (f nodeFacts) unservedLineages() []string {
	want := map[string]bool{}
	for _, p := range append(append([]fleet.Pool(nil), f.cfg.FromPools...), f.cfg.ToPools...) {
		if l, ok := f.cfg.Lineage[p.Key()]; ok && p.Desired > 0 {
			want[l] = true
		}
	}
	from := fleet.PoolSet(f.cfg.FromPools)
	for _, w := range f.inv.Workers {
		if from[w.PoolKey()] && w.Node == f.node.Name {
			continue
		}
		if l, ok := f.cfg.Lineage[w.PoolKey()]; ok && w.Serving() {
			delete(want, l)
		}
	}
	out := make([]string, 0, len(want))
	for l := range want {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// toVerified is the verify step's verdict on pods and workers as shown.
func (f nodeFacts) toVerified() (bool, string) {
	ready, total := f.toPodsReady()
	active := f.toWorkersActive()
	if u := f.unservedLineages(); len(u) > 0 {
		return false, fmt.Sprintf("no worker of pool %s or its clone serves anywhere (registered, ACTIVE, capacity reported): "+
			"its actors would have nowhere to resume. Are the clone's pods Pending (kubectl get pods -n NS -l %s; a "+
			"ResourceQuota, a taint, an image of another architecture)?", fleet.Brief(u), fleet.PoolLabel)
	}
	why := fmt.Sprintf("%d of %d %s worker pod(s) on the node Ready, %d registered ACTIVE and serving (era D: capacity "+
		"reported)", ready, total, f.cfg.To, active)
	if ready == total && active == 0 && f.toMustServeHere() {
		return false, why + "; no " + f.cfg.To + " worker serves on any other node, so one must come up here " +
			"(the target pools' pods are Pending until the scheduler places them)"
	}
	return ready == total && active >= ready, why
}

// toWorkersActive counts the node's target-pool workers that serve:
// ACTIVE, and in era D with their capacity reported.
func (f nodeFacts) toWorkersActive() int {
	to := fleet.PoolSet(f.cfg.ToPools)
	n := 0
	for _, w := range f.workers() {
		if to[w.PoolKey()] && w.Serving() {
			n++
		}
	}
	return n
}
