package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
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
type PDBClaims map[string][]string

// readPDBClaims reads, for each PDB selecting a pod the drain of f's node
// would evict and allowing a disruption now, the pods it covers on the
// other nodes rollbook has cordoned. It reads nothing when no such PDB
// exists (the common case): one list of the cordoned nodes, then one list
// per PDB.
func readPDBClaims(ctx context.Context, cs kubernetes.Interface, f *Facts, evicts func(*Facts, *corev1.Pod) bool,
) (PDBClaims, error) {
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
	// A consistent read: a cordon this run just made must be counted.
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.unschedulable", "true").String()})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for i := range nl.Items {
		n := &nl.Items[i]
		if st := kube.CordonStateOf(n); n.Name != f.Node.Name && st.Cordoned && st.Owner != "" {
			out[n.Name] = true
		}
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
			// An evicted pod is already counted in the PDB's status.
			if out[p.Spec.NodeName] && p.DeletionTimestamp == nil && kube.Evictable(p) {
				claims[c.ns+"/"+c.name] = append(claims[c.ns+"/"+c.name], p.Spec.NodeName)
			}
		}
	}
	return claims, nil
}

// claimedBlockers are the pods f's drain would evict whose PDBs allow
// disruptions now that other cordoned nodes' drains will take first. They
// settle when those nodes' drains end (another target's end), never by a
// person's hand.
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
			nodes := append([]string(nil), taken...)
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
