package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

// DrainOptions tune Drain.
type DrainOptions struct {
	// Selects which pods to evict; nil means every pod kubectl drain would
	// evict. Pods it rejects stay on the node.
	PodFilter func(*corev1.Pod) bool
	// Pods, when not nil, are the node's pods as the caller just observed
	// them: Drain evicts from them instead of listing the node again.
	Pods []corev1.Pod
	// Why is shown in events on each evicted pod.
	Why string
	// Timeout bounds the whole drain; 0 means 5 minutes.
	Timeout time.Duration
	// RetryDelay is the longest an eviction refused by a PDB (HTTP 429)
	// waits before it is tried again; 0 means 30 s. The retry comes as soon
	// as a watch sees the PDB allow a disruption (a replacement pod became
	// ready), so this bounds only a wait on a PDB that cannot be watched.
	RetryDelay time.Duration
	// Force evicts pods no controller will recreate (bare pods).
	Force bool
	// DeleteEmptyDirData evicts pods with emptyDir volumes, whose data is
	// deleted with them (kubectl drain --delete-emptydir-data); without it
	// they are left, and named.
	DeleteEmptyDirData bool
	// GracePeriodSeconds, when not nil, replaces each pod's own
	// terminationGracePeriodSeconds (kubectl drain --grace-period); 0 asks
	// for an immediate stop.
	GracePeriodSeconds *int64
	// NoWait returns once every eviction was accepted, for callers that
	// wait for the pods to be gone themselves.
	NoWait bool
	// Log receives a line per eviction attempt; nil discards them.
	Log io.Writer
}

// DrainBlocker is a pod still on the node when a drain gave up, and why.
type DrainBlocker struct {
	Namespace, Name string
	// PDBs whose disruption budget is exhausted for this pod.
	PDBs []string
	// Settles: every one of PDBs may allow a disruption by itself
	// (PDBMaySettle).
	Settles bool
	// Reason is the last eviction error, if any.
	Reason string
	// Claimed: the PDBs allow a disruption now, but other nodes' drains of
	// the same run will take it first; only their end frees it.
	Claimed bool
}

func (b DrainBlocker) String() string {
	s := b.Namespace + "/" + b.Name
	if len(b.PDBs) > 0 {
		s += " (blocked by PodDisruptionBudget " + strings.Join(b.PDBs, ", ") + ")"
	} else if b.Reason != "" {
		s += " (" + b.Reason + ")"
	}
	return s
}

// DrainError says which pods a drain could not evict and what blocks them.
type DrainError struct {
	Node     string
	Blockers []DrainBlocker
	Err      error
}

func (e *DrainError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "drain %s did not finish: %v", e.Node, e.Err)
	for _, bl := range e.Blockers {
		fmt.Fprintf(&b, "\n  - %s", bl)
	}
	return b.String()
}

func (e *DrainError) Unwrap() error { return e.Err }

// Drain evicts the pods on node that the filter selects, through the
// eviction API (PDBs are honoured: a refused eviction is retried when a
// watch sees the PDB allow one), all at once, and waits until they are gone.
// DaemonSet pods are never evicted, and neither are rollbook's helper pods.
// The node should already be cordoned. On failure the error is a
// *DrainError naming every pod left and the PDB blocking it.
func Drain(ctx context.Context, cs kubernetes.Interface, rec Recorder, node string, o DrainOptions) error {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	pods := o.Pods
	if pods == nil {
		var err error
		if pods, err = PodsOnNode(dctx, cs, node); err != nil {
			return err
		}
	}
	var evict []*corev1.Pod
	var bare []DrainBlocker
	for i := range pods {
		p := &pods[i]
		if !Evictable(p) || (o.PodFilter != nil && !o.PodFilter(p)) {
			continue
		}
		if !o.Force && metav1.GetControllerOf(p) == nil {
			bare = append(bare, DrainBlocker{Namespace: p.Namespace, Name: p.Name,
				Reason: "no controller recreates it; an eviction deletes it for good (--force evicts it)"})
			continue
		}
		if !o.DeleteEmptyDirData && HasLocalData(p) {
			bare = append(bare, DrainBlocker{Namespace: p.Namespace, Name: p.Name,
				Reason: "its emptyDir data is deleted with it (--delete-emptydir-data evicts it)"})
			continue
		}
		evict = append(evict, p)
	}
	if len(bare) > 0 {
		return &DrainError{Node: node, Blockers: bare, Err: errors.New("pods a drain may not evict without a flag")}
	}
	var (
		mu       sync.Mutex
		lastErrs = map[string]string{}
		wg       sync.WaitGroup
		failed   error
	)
	why := o.Why
	if why == "" {
		why = "draining node " + node
	}
	for _, p := range evict {
		rec.Record(ctx, PodRef(p), false, "Evicting", fmt.Sprintf("evicting from %s: %s", node, why))
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := evictPod(dctx, cs, p, o, func(msg string) {
				mu.Lock()
				lastErrs[p.Name] = msg
				mu.Unlock()
			})
			if err != nil {
				mu.Lock()
				if failed == nil {
					failed = err
				}
				mu.Unlock()
				cancel() // one eviction that cannot go on ends the drain
			}
		}()
	}
	wg.Wait()
	err := failed
	if err == nil && !o.NoWait && len(evict) > 0 {
		uids := map[types.UID]bool{}
		for _, p := range evict {
			uids[p.UID] = true
		}
		err = WaitForNoPods(dctx, cs, node, func(p *corev1.Pod) bool { return uids[p.UID] })
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if dctx.Err() != nil && failed == nil {
		err = fmt.Errorf("drain did not finish within %s", o.Timeout)
	}
	blockers, berr := DrainBlockers(context.WithoutCancel(ctx), cs, node, o.PodFilter)
	if berr != nil {
		return fmt.Errorf("drain %s: %w (and listing what blocks it failed: %v)", node, err, berr)
	}
	mu.Lock()
	for i := range blockers {
		if r, ok := lastErrs[blockers[i].Name]; ok && len(blockers[i].PDBs) == 0 {
			blockers[i].Reason = strings.TrimSpace(r)
		}
	}
	mu.Unlock()
	return &DrainError{Node: node, Blockers: blockers, Err: err}
}

// evictPod posts p's eviction until it is accepted (or p is gone). A 429
// (a PDB allows no disruption now) waits, by watch, until a PDB selecting
// p allows one, at most o.RetryDelay, then tries again.
func evictPod(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, o DrainOptions, refused func(string)) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}}
	if o.GracePeriodSeconds != nil {
		ev.DeleteOptions.GracePeriodSeconds = ptr.To(*o.GracePeriodSeconds)
	}
	for {
		err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Accepted, or the pod is already gone (or replaced).
			fmt.Fprintf(o.Log, "evicted pod %s/%s\n", p.Namespace, p.Name)
			return nil
		case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// Its namespace is being deleted and takes the pod with it: no
			// eviction can be created there, so wait for that deletion.
			fmt.Fprintf(o.Log, "pod %s/%s: its namespace is terminating; waiting for it to be deleted\n", p.Namespace, p.Name)
			_, werr := WaitForPod(ctx, cs, p.Namespace, p.Name, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
			if werr == nil || errors.Is(werr, ErrGone) {
				return nil
			}
			return werr
		case apierrors.IsTooManyRequests(err):
			msg := fmt.Sprintf("error when evicting pods/%q -n %q (will retry when its PDB allows): %v", p.Name, p.Namespace, err)
			fmt.Fprintln(o.Log, msg)
			refused(msg)
			admitted, _, werr := waitDisruptionAllowed(ctx, cs, p, o.RetryDelay)
			if werr != nil {
				return werr
			}
			if admitted {
				// An earlier eviction of p was admitted (its PDB counts p as
				// disrupted) but its delete was lost, e.g. the request was
				// cancelled when an earlier run was killed. The budget
				// already paid for p: finish that eviction rather than wait
				// minutes for the PDB to forget it.
				fmt.Fprintf(o.Log, "pod %s/%s: its eviction was admitted but it was not deleted; deleting it\n", p.Namespace, p.Name)
				err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, *ev.DeleteOptions)
				if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					return nil
				}
				return fmt.Errorf("delete %s/%s after its admitted eviction: %w", p.Namespace, p.Name, err)
			}
		default:
			return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
}

// waitDisruptionAllowed watches the PDBs of p's namespace until one that
// selects p allows a disruption (or none selects it any more), for at
// most max. admitted reports a PDB selecting p that lists it among its
// disrupted pods: an eviction of p was admitted already; allowed, either
// of the two seen (not the bound passing). It returns an error only when
// ctx ends.
func waitDisruptionAllowed(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, max time.Duration) (admitted, allowed bool,
	err error) {
	wctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	pdbs := cs.PolicyV1().PodDisruptionBudgets(p.Namespace)
	lw := FieldSelectedLW(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pdbs.List(ctx, o) },
		pdbs.Watch, "")
	allows := func(objs []any) bool {
		allowed := true
		for _, o := range objs {
			pdb := o.(*policyv1.PodDisruptionBudget)
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			if _, ok := pdb.Status.DisruptedPods[p.Name]; ok {
				admitted = true
				return true
			}
			if pdb.Status.DisruptionsAllowed < 1 || pdb.Status.ObservedGeneration < pdb.Generation {
				allowed = false
			}
		}
		return allowed // every PDB selecting p allows one now (or none selects it any more)
	}
	var store cache.Store
	_, werr := watchtools.UntilWithSync(wctx, lw, &policyv1.PodDisruptionBudget{}, func(s cache.Store) (bool, error) {
		store = s
		return allows(s.List()), nil
	}, func(watch.Event) (bool, error) { return allows(store.List()), nil })
	if ctx.Err() != nil {
		return false, false, context.Cause(ctx)
	}
	return admitted, werr == nil, nil // allowed, admitted, or the bound passed: try again
}

// DrainBlockers lists the pods on node a drain would still evict, with the
// PDBs that allow no disruption for each.
func DrainBlockers(ctx context.Context, cs kubernetes.Interface, node string, filter func(*corev1.Pod) bool) ([]DrainBlocker, error) {
	pods, err := PodsOnNode(ctx, cs, node)
	if err != nil {
		return nil, err
	}
	pdbs, err := ListPDBsFor(ctx, cs, pods, filter)
	if err != nil {
		return nil, err
	}
	return PDBBlockers(pods, pdbs, filter), nil
}

// HasLocalData reports a pod with an emptyDir volume: its data lives on
// the node and is deleted with the pod, so kubectl drain evicts it only
// with --delete-emptydir-data. rollbook's own in-cluster runner is not
// one: its emptyDir is scratch, its run's state is in the cluster.
func HasLocalData(p *corev1.Pod) bool {
	if _, runner := p.Labels[LabelInCluster]; runner {
		return false
	}
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].EmptyDir != nil {
			return true
		}
	}
	return false
}

// Evictable reports whether a drain would evict p: not terminal, not
// already being deleted, not a DaemonSet pod, not a static (mirror) pod and
// not one of rollbook's helper pods.
func Evictable(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if _, helper := p.Labels[LabelHelper]; helper {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// PodsOnNode lists the pods bound to node (a field-selected list, so cost
// follows the node's pods, not the cluster's).
func PodsOnNode(ctx context.Context, cs kubernetes.Interface, node string) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods on %s: %w", node, err)
	}
	return l.Items, nil
}
