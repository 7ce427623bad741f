package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// PDBClaims are, per PodDisruptionBudget ("namespace/name") that allows a
// disruption now, the nodes rollbook has cordoned whose drain has yet to
// evict a pod it covers: one entry per such pod. The budget a cordon
// decides on is the PDB's allowance less these: a node cordoned before
// this one takes its disruptions at its drain, which has not happened yet
// (the cordon spends the node budget, the drain the PDB's).
type PDBClaims map[string][]PDBClaim

// PDBClaim is one pod a cordoned node's drain has yet to evict.
type PDBClaim struct{ Node, Pod string }

// readPDBClaims reads, for each PDB selecting a pod the drain of f's node
// would evict and allowing a disruption now, the pods it covers on the
// other nodes rollbook has cordoned. It reads nothing when no such PDB
// exists (the common case): one list of the cordoned nodes, then one list
// per PDB.
func readPDBClaims(ctx context.Context, cs kubernetes.Interface, f *Facts, evicts func(*Facts, *corev1.Pod) bool,
	outNames []string) (PDBClaims, error) {
	type pdbSel struct {
		ns, name string
		sel      labels.Selector
	}
	var cands []pdbSel
	seen := map[string]bool{}
	for i := range f.Pods {
		p := &f.Pods[i]
		if !kube.Evictable(p) || !evicts(f, p) {
			continue
		}
		for j := range f.PDBs[p.Namespace] {
			pdb := &f.PDBs[p.Namespace][j]
			key := pdb.Namespace + "/" + pdb.Name
			if seen[key] || pdb.Status.DisruptionsAllowed < 1 {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			seen[key] = true
			cands = append(cands, pdbSel{pdb.Namespace, pdb.Name, sel})
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	// The nodes out of service as this observation read them for the
	// budget, or a consistent read of them: a cordon this run just made
	// must be counted.
	names := outNames
	if names == nil {
		o, err := othersOutOfService(ctx, cs, f.Node.Name)
		if err != nil {
			return nil, err
		}
		names = o.names
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	if len(out) == 0 {
		return nil, nil
	}
	claims := PDBClaims{}
	for _, c := range cands {
		pl, err := cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: c.sel.String()})
		if err != nil {
			return nil, err
		}
		for i := range pl.Items {
			p := &pl.Items[i]
			// An evicted pod is counted in the status read below.
			if out[p.Spec.NodeName] && kube.Evictable(p) {
				claims[c.ns+"/"+c.name] = append(claims[c.ns+"/"+c.name], PDBClaim{Node: p.Spec.NodeName, Pod: p.Name})
			}
		}
		// The status the cordon decides on is read after the pods: one
		// read before them misses an eviction made in between, which the
		// list no longer shows as a claim either (seen: two nodes
		// cordoned at once). An eviction after the list is counted twice
		// for a moment, which only waits.
		pdb, err := cs.PolicyV1().PodDisruptionBudgets(c.ns).Get(ctx, c.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			f.PDBs = f.PDBs.Replace(c.ns, c.name, nil)
			delete(claims, c.ns+"/"+c.name)
		case err != nil:
			return nil, err
		default:
			f.PDBs = f.PDBs.Replace(c.ns, c.name, pdb)
		}
	}
	return claims, nil
}

// claimedBlockers are the pods f's drain would evict whose PDBs allow
// disruptions now that other cordoned nodes' drains will take first. They
// settle when one of those drains evicts a claimed pod (waitClaimTaken),
// never by a person's hand.
func claimedBlockers(f *Facts, evicts func(*Facts, *corev1.Pod) bool) []kube.DrainBlocker {
	if len(f.PDBClaims) == 0 {
		return nil
	}
	var blocked []kube.DrainBlocker
	for i := range f.Pods {
		p := &f.Pods[i]
		if !kube.Evictable(p) || !evicts(f, p) {
			continue
		}
		var names []string
		for j := range f.PDBs[p.Namespace] {
			pdb := &f.PDBs[p.Namespace][j]
			taken := f.PDBClaims[pdb.Namespace+"/"+pdb.Name]
			if len(taken) == 0 || int32(len(taken)) < pdb.Status.DisruptionsAllowed {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			var nodes []string
			for _, c := range taken {
				nodes = append(nodes, c.Node)
			}
			sort.Strings(nodes)
			names = append(names, fmt.Sprintf("%s (%d disruption(s) allowed, taken by the drain of cordoned node(s) %s)",
				pdb.Name, pdb.Status.DisruptionsAllowed, strings.Join(compactStrings(nodes), ", ")))
		}
		if len(names) > 0 {
			blocked = append(blocked, kube.DrainBlocker{Namespace: p.Namespace, Name: p.Name, PDBs: names, Settles: true,
				Claimed: true})
		}
	}
	return blocked
}

// compactStrings drops adjacent repeats of a sorted list.
func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// waitClaimTaken watches, at most max, the pods other cordoned nodes'
// drains have yet to evict under the PDBs claimed from f's drain, until one
// of them leaves: the drain that claimed it has taken the disruption, which
// the PDB's status now counts, so the cordon decides again on that, at
// once, rather than at the end of the claiming node's whole task.
func waitClaimTaken(ctx context.Context, cs kubernetes.Interface, f *Facts, max time.Duration) bool {
	type claimed struct {
		ns    string
		sel   labels.Selector
		names []string
	}
	var waits []claimed
	var claiming []string
	for ns, pdbs := range f.PDBs {
		for i := range pdbs {
			taken := f.PDBClaims[ns+"/"+pdbs[i].Name]
			if len(taken) == 0 {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdbs[i].Spec.Selector)
			if err != nil || sel.Empty() {
				continue
			}
			c := claimed{ns: ns, sel: sel}
			for _, t := range taken {
				c.names = append(c.names, t.Pod)
				claiming = append(claiming, t.Node)
			}
			waits = append(waits, c)
		}
	}
	if len(waits) == 0 {
		return false
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	left := make(chan bool, len(waits)+1)
	for _, c := range waits {
		go func() { left <- kube.WaitAnyLeaves(wctx, cs, c.ns, c.sel, c.names, max) }()
	}
	// A claiming node back in service (its roll stopped and undone, or a
	// person uncordoned it) will not drain: its claims are void.
	go func() { left <- kube.WaitAnyUncordoned(wctx, cs, claiming, max) }()
	for range len(waits) + 1 {
		if <-left {
			return true
		}
	}
	return false
}
