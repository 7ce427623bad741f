package kube

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// What the PodDisruptionBudgets of a node's pods allow: which refuse an
// eviction now, which may settle by themselves, and waits for either.

// PDBsByNamespace are the PodDisruptionBudgets of some namespaces, as read.
type PDBsByNamespace map[string][]policyv1.PodDisruptionBudget

// Replace returns a copy with namespace ns's PDB name replaced by pdb (a
// newer read), or dropped when pdb is nil; b itself, which observations
// may share, is left as it was.
func (b PDBsByNamespace) Replace(ns, name string, pdb *policyv1.PodDisruptionBudget) PDBsByNamespace {
	out := make(PDBsByNamespace, len(b))
	maps.Copy(out, b)
	var list []policyv1.PodDisruptionBudget
	for _, p := range b[ns] {
		switch {
		case p.Name != name:
			list = append(list, p)
		case pdb != nil:
			list = append(list, *pdb)
		}
	}
	out[ns] = list
	return out
}

// ListPDBsFor reads the PDBs of the namespaces of the pods a drain would
// evict (filter): one list per namespace.
func ListPDBsFor(ctx context.Context, cs kubernetes.Interface, pods []corev1.Pod, filter func(*corev1.Pod) bool,
) (PDBsByNamespace, error) {
	out := PDBsByNamespace{}
	for i := range pods {
		p := &pods[i]
		if _, ok := out[p.Namespace]; ok || !Evictable(p) || (filter != nil && !filter(p)) {
			continue
		}
		l, err := cs.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out[p.Namespace] = l.Items
	}
	for i := range pods {
		p := &pods[i]
		if Evictable(p) && (filter == nil || filter(p)) {
			countReplacements(ctx, cs, p, out[p.Namespace])
		}
	}
	return out, nil
}

// countReplacements raises, for each PDB over p that reads as every pod
// healthy at no disruption allowed, the pods it expects to the replicas
// p's controller (a ReplicaSet or a StatefulSet) wants. With an integer
// minAvailable the disruption controller expects only the pods that exist,
// so in the moment between an eviction and its replacement's creation a
// budget with room reads like one only a person can change; expecting what
// the controller wants, the missing replacement makes it one that settles
// (PDBMaySettle). The controller is read only for such a budget; one that
// cannot be read leaves the budget as it reads (refused, not waited for).
func countReplacements(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) {
	var want int32 = -1 // not read yet
	for i := range pdbs {
		pdb := &pdbs[i]
		if pdb.Status.DisruptionsAllowed >= 1 || PDBMaySettle(pdb) || pdb.Spec.MinAvailable == nil ||
			pdb.Spec.MinAvailable.Type != intstr.Int {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if want < 0 {
			want = controllerWants(ctx, cs, p)
		}
		pdb.Status.ExpectedPods = max(pdb.Status.ExpectedPods, want)
	}
}

// controllerWants is how many replicas p's controller wants (0 when it has
// none that says, or it cannot be read).
func controllerWants(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) int32 {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return 0
	}
	switch ref.Kind {
	case "ReplicaSet":
		rs, err := cs.AppsV1().ReplicaSets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil && rs.UID == ref.UID && rs.Spec.Replicas != nil {
			return *rs.Spec.Replicas
		}
	case "StatefulSet":
		ss, err := cs.AppsV1().StatefulSets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil && ss.UID == ref.UID && ss.Spec.Replicas != nil {
			return *ss.Spec.Replicas
		}
	}
	return 0
}

// PDBBlockers decides, from PDBs already read (ListPDBsFor), each pod a
// drain would evict (filter) with the PDBs allowing it no disruption now;
// pure, so a guard decides on it.
func PDBBlockers(pods []corev1.Pod, pdbs PDBsByNamespace, filter func(*corev1.Pod) bool) []DrainBlocker {
	var out []DrainBlocker
	for i := range pods {
		p := &pods[i]
		if !Evictable(p) || (filter != nil && !filter(p)) {
			continue
		}
		b := DrainBlocker{Namespace: p.Namespace, Name: p.Name}
		b.PDBs, b.Settles = blockingPDBs(p, pdbs[p.Namespace])
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// BlockingPDBs names the PDBs selecting p that allow no disruption now.
func BlockingPDBs(p *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []string {
	names, _ := blockingPDBs(p, pdbs)
	return names
}

// blockingPDBs names the PDBs selecting p that allow no disruption now, and
// says whether every one of them may allow one without anyone changing it
// (PDBMaySettle).
func blockingPDBs(p *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) (names []string, settles bool) {
	settles = true
	for i := range pdbs {
		pdb := &pdbs[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if pdb.Status.DisruptionsAllowed < 1 && !unhealthyEvictable(p, pdb) {
			names = append(names, fmt.Sprintf("%s (%d of %d healthy, %d disruptions allowed)",
				pdb.Name, pdb.Status.CurrentHealthy, pdb.Status.ExpectedPods, pdb.Status.DisruptionsAllowed))
			settles = settles && PDBMaySettle(pdb)
		}
	}
	return names, settles && len(names) > 0
}

// unhealthyEvictable: the eviction API lets an unready p go despite pdb at
// 0 (its unhealthyPodEvictionPolicy: AlwaysAllow, or the default
// IfHealthyBudget while the budget's healthy pods suffice).
func unhealthyEvictable(p *corev1.Pod, pdb *policyv1.PodDisruptionBudget) bool {
	if PodReady(p) {
		return false
	}
	if pol := pdb.Spec.UnhealthyPodEvictionPolicy; pol != nil && *pol == policyv1.AlwaysAllow {
		return true
	}
	return pdb.Status.ObservedGeneration >= pdb.Generation && pdb.Status.DesiredHealthy > 0 &&
		pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy
}

// PDBMaySettle reports a PDB at no disruption allowed that may allow one
// by itself: fewer of its pods are healthy than it expects (one is being
// replaced, e.g. after an earlier node's drain), an eviction it admitted is
// not yet counted (disruptedPods), or its controller has not yet observed
// its spec. All healthy at 0 (maxUnavailable 0, minAvailable as many as
// there are pods) needs a person.
func PDBMaySettle(pdb *policyv1.PodDisruptionBudget) bool {
	return pdb.Status.ObservedGeneration < pdb.Generation || pdb.Status.CurrentHealthy < pdb.Status.ExpectedPods ||
		len(pdb.Status.DisruptedPods) > 0
}

// WaitDisruptionsAllowed watches, at most max, until for each of pods every
// PDB selecting it allows a disruption (or none selects it any more), and
// reports whether that happened.
func WaitDisruptionsAllowed(ctx context.Context, cs kubernetes.Interface, pods []*corev1.Pod, max time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	for _, p := range pods {
		if _, ok, err := waitDisruptionAllowed(wctx, cs, p, max); err != nil || !ok {
			return false
		}
	}
	return true
}

// WaitAnyLeaves watches, at most max, the pods sel selects in ns until
// one of names is being deleted or gone (another drain evicted it), and
// reports whether that happened: a PDB's disruption that drain claimed is
// then counted in the PDB's own status.
func WaitAnyLeaves(ctx context.Context, cs kubernetes.Interface, ns string, sel labels.Selector, names []string,
	max time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	pods := cs.CoreV1().Pods(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel.String()
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.String()
			return pods.Watch(ctx, o)
		},
	}
	left := func(s cache.Store) bool {
		for _, n := range names {
			o, ok, err := s.GetByKey(ns + "/" + n)
			if err != nil || !ok || !Evictable(o.(*corev1.Pod)) {
				return true
			}
		}
		return false
	}
	var store cache.Store
	_, err := watchtools.UntilWithSync(wctx, lw, &corev1.Pod{}, func(s cache.Store) (bool, error) {
		store = s
		return left(s), nil
	}, func(watch.Event) (bool, error) { return left(store), nil })
	return err == nil && ctx.Err() == nil
}

// WaitAnyUncordoned watches, at most max, the cordoned nodes until one of
// names is no longer cordoned by rollbook (uncordoned, or its cordon now
// another's). It reports whether one was; a name already so counts at once.
func WaitAnyUncordoned(ctx context.Context, cs kubernetes.Interface, names []string, max time.Duration) bool {
	if len(names) == 0 {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	nodes := cs.CoreV1().Nodes()
	lw := FieldSelectedLW(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) },
		nodes.Watch, fields.OneTermEqualSelector("spec.unschedulable", "true").String())
	back := func(s cache.Store) bool {
		for _, n := range names {
			o, ok, err := s.GetByKey(n)
			if err != nil || !ok || CordonStateOf(o.(*corev1.Node)).Owner == "" {
				return true
			}
		}
		return false
	}
	var store cache.Store
	_, err := watchtools.UntilWithSync(wctx, lw, &corev1.Node{}, func(s cache.Store) (bool, error) {
		store = s
		return back(s), nil
	}, func(watch.Event) (bool, error) { return back(store), nil })
	return err == nil && ctx.Err() == nil
}
