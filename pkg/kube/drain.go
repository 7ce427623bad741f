package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
)

// DrainOptions tune Drain.
type DrainOptions struct {
	// Selects which pods to evict; nil means every pod kubectl drain would
	// evict. Pods it rejects stay on the node.
	PodFilter func(*corev1.Pod) bool
	// Why is shown in events on each evicted pod.
	Why string
	// Timeout bounds the whole drain; 0 means 5 minutes.
	Timeout time.Duration
	// RetryDelay between eviction attempts refused by a PDB (HTTP 429);
	// 0 means 2 s.
	RetryDelay time.Duration
	// Force evicts pods no controller will recreate (bare pods).
	Force bool
	// GracePeriodSeconds overrides pods' grace periods; -1 keeps theirs.
	GracePeriodSeconds int
	// Log receives kubectl drain's progress lines; nil discards them.
	Log io.Writer
}

// DrainBlocker is a pod still on the node when a drain gave up, and why.
type DrainBlocker struct {
	Namespace, Name string
	// PDBs whose disruption budget is exhausted for this pod.
	PDBs []string
	// Reason is the last eviction error, if any.
	Reason string
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
// eviction API (PDBs are honoured; 429s are retried after RetryDelay), and
// waits until they are gone. DaemonSet pods are never evicted, and neither
// are rollbook's helper pods. The node should already be cordoned. On
// failure the error is a *DrainError naming every pod left and the PDB
// blocking it.
func Drain(ctx context.Context, cs kubernetes.Interface, rec Recorder, node string, o DrainOptions) error {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = 2 * time.Second
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	var (
		mu       sync.Mutex
		lastErrs = map[string]string{}
		recorded = map[types.UID]bool{}
	)
	errLog := &lineSink{w: log, onLine: func(l string) {
		// kubectl's drain reports refused evictions only as text.
		if i := strings.Index(l, "evicting pods/\""); i >= 0 {
			rest := l[i+len("evicting pods/\""):]
			if j := strings.IndexByte(rest, '"'); j > 0 {
				mu.Lock()
				lastErrs[rest[:j]] = l
				mu.Unlock()
			}
		}
	}}
	h := &drain.Helper{
		Ctx:                  ctx,
		Client:               cs,
		Force:                o.Force,
		GracePeriodSeconds:   o.GracePeriodSeconds,
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   true,
		Timeout:              o.Timeout,
		EvictErrorRetryDelay: o.RetryDelay,
		Out:                  log,
		ErrOut:               errLog,
		AdditionalFilters: []drain.PodFilter{func(p corev1.Pod) drain.PodDeleteStatus {
			if _, helper := p.Labels[LabelHelper]; helper {
				return drain.MakePodDeleteStatusSkip()
			}
			if o.PodFilter != nil && !o.PodFilter(&p) {
				return drain.MakePodDeleteStatusSkip()
			}
			return drain.MakePodDeleteStatusOkay()
		}},
		OnPodDeletionOrEvictionStarted: func(p *corev1.Pod, usingEviction bool) {
			// kubectl's drain calls this on every retry of a refused
			// eviction; one event per pod is enough.
			mu.Lock()
			seen := recorded[p.UID]
			recorded[p.UID] = true
			mu.Unlock()
			if seen {
				return
			}
			why := o.Why
			if why == "" {
				why = "draining node " + node
			}
			rec.Record(ctx, PodRef(p), false, "Evicting", fmt.Sprintf("evicting from %s: %s", node, why))
		},
	}
	if o.GracePeriodSeconds == 0 {
		h.GracePeriodSeconds = -1
	}
	err := drain.RunNodeDrain(h, node)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = ctx.Err()
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

// DrainBlockers lists the pods on node a drain would still evict, with the
// PDBs that allow no disruption for each.
func DrainBlockers(ctx context.Context, cs kubernetes.Interface, node string, filter func(*corev1.Pod) bool) ([]DrainBlocker, error) {
	pods, err := PodsOnNode(ctx, cs, node)
	if err != nil {
		return nil, err
	}
	pdbsByNS := map[string][]policyv1.PodDisruptionBudget{}
	var out []DrainBlocker
	for i := range pods {
		p := &pods[i]
		if !Evictable(p) || (filter != nil && !filter(p)) {
			continue
		}
		pdbs, ok := pdbsByNS[p.Namespace]
		if !ok {
			l, err := cs.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			pdbs = l.Items
			pdbsByNS[p.Namespace] = pdbs
		}
		b := DrainBlocker{Namespace: p.Namespace, Name: p.Name}
		b.PDBs = BlockingPDBs(p, pdbs)
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out, nil
}

// BlockingPDBs names the PDBs selecting p that allow no disruption now.
func BlockingPDBs(p *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []string {
	var names []string
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if pdb.Status.DisruptionsAllowed < 1 {
			names = append(names, fmt.Sprintf("%s (%d of %d healthy, %d disruptions allowed)",
				pdb.Name, pdb.Status.CurrentHealthy, pdb.Status.ExpectedPods, pdb.Status.DisruptionsAllowed))
		}
	}
	return names
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

// lineSink splits writes into lines for onLine and passes them on to w.
type lineSink struct {
	w      io.Writer
	onLine func(string)
	buf    bytes.Buffer
}

func (s *lineSink) Write(p []byte) (int, error) {
	s.buf.Write(p)
	for {
		line, err := s.buf.ReadString('\n')
		if errors.Is(err, io.EOF) {
			s.buf.WriteString(line)
			break
		}
		s.onLine(line)
	}
	return s.w.Write(p)
}
