package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// pdbBlocked are the pods the drain would evict (evicts) that a PDB allowing
// no disruption holds, decided on the PDBs observed (f.PDBs): preflight's
// pdb check and the cordon's guards are this one function.
func pdbBlocked(f *Facts, evicts func(*Facts, *corev1.Pod) bool) []kube.DrainBlocker {
	if f.PDBs == nil {
		return nil
	}
	var out []kube.DrainBlocker
	blocked := map[string]bool{}
	for _, b := range kube.PDBBlockers(f.Pods, f.PDBs, func(p *corev1.Pod) bool { return evicts(f, p) }) {
		if len(b.PDBs) > 0 {
			out = append(out, b)
			blocked[b.Namespace+"/"+b.Name] = true
		}
	}
	for _, b := range claimedBlockers(f, evicts) {
		if !blocked[b.Namespace+"/"+b.Name] {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// pdbMessage is one blocked pod's line, with its fix.
func pdbMessage(b kube.DrainBlocker) string {
	s := fmt.Sprintf("pod %s/%s is covered by PodDisruptionBudget %s: ", b.Namespace, b.Name, strings.Join(b.PDBs, ", "))
	if b.Claimed {
		return s + "waiting, uncordoned, for those nodes' drains to take it (a node is cordoned only when its " +
			"drain can go on at once)"
	}
	if b.Settles {
		return s + "it allows no disruption until its pods are healthy again (one may be being replaced); the drain would " +
			"wait for it with the node cordoned; let the workload's pods become ready, scale it up or relax the budget first"
	}
	return s + "the drain would wait for it with the node cordoned; scale its workload up or relax the budget first"
}

// pdbMessages are the lines of blockers, those that settle by themselves
// or the others.
func pdbMessages(blockers []kube.DrainBlocker, settling bool) []string {
	var out []string
	for _, b := range blockers {
		if b.Settles == settling {
			out = append(out, pdbMessage(b))
		}
	}
	sort.Strings(out)
	return out
}

// pdbGuards keep a node uncordoned while a PDB allows none of the
// disruptions its drain needs, decided on the PDBs read for the cordon (one
// cordon at a time): at once (exit 3) when only a person can change that
// (every pod healthy at 0: maxUnavailable 0, minAvailable all); otherwise
// (a pod of it is being replaced, e.g. after an earlier node's drain in
// this roll; or its allowance is claimed by cordoned nodes' drains still to
// come) waiting, uncordoned, for another node of the run to end, for a
// claiming drain to evict, or for the PDB to allow one, at most wait.
func pdbGuards(cs kubernetes.Interface, rb string, enabled bool, evicts func(*Facts, *corev1.Pod) bool,
	wait time.Duration) pdbGuardPair {
	if !enabled {
		return pdbGuardPair{}
	}
	if wait <= 0 {
		wait = 10 * time.Minute // the drain's own default
	}
	refuse := func(f Facts, msgs []string) (bool, string) {
		return len(msgs) == 0, fmt.Sprintf("%s will not take node %s out of service: %s", rb, f.Node.Name, strings.Join(msgs, "; "))
	}
	return pdbGuardPair{refuse: []runbook.Guard[Facts]{{
		Name: "no PodDisruptionBudget that only a person can change forbids the drain",
		Check: func(f Facts) (bool, string) {
			return refuse(f, pdbMessages(pdbBlocked(&f, evicts), false))
		},
	}}, wait: []runbook.Guard[Facts]{{
		Name: "every PodDisruptionBudget over the pods to evict allows a disruption " +
			"(waited for, uncordoned, up to --drain-timeout)",
		SharedBudget: true,
		Check: func(f Facts) (bool, string) {
			return refuse(f, pdbMessages(pdbBlocked(&f, evicts), true))
		},
		Settle: func(ctx context.Context, f Facts) bool {
			var pods []*corev1.Pod
			for _, b := range pdbBlocked(&f, evicts) {
				if b.Claimed { // freed when a claiming drain evicts
					return waitClaimTaken(ctx, cs, &f, wait)
				}
				for i := range f.Pods {
					if p := &f.Pods[i]; p.Namespace == b.Namespace && p.Name == b.Name {
						pods = append(pods, p)
					}
				}
			}
			return kube.WaitDisruptionsAllowed(ctx, cs, pods, wait)
		},
	}}}
}

// pdbGuardPair are a cordon's PDB guards: refuse at once, or wait.
type pdbGuardPair struct{ refuse, wait []runbook.Guard[Facts] }
