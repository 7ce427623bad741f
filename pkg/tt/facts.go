package tt

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Facts is what every tt runbook observes about one node.
type Facts struct {
	// Owner is the runbook that owns the node's cordon while it works.
	Owner string
	Node  *corev1.Node
	// Helper is the task's helper pod (kmd, smi or flash), if any.
	Helper helperFacts
	// Probe is this run's probe helper pod, if any.
	Probe helperFacts
	// Helpers are every helper pod on the node (any task, any run: helpers
	// are pinned to their node by name), when helpersRead.
	Helpers     []corev1.Pod
	helpersRead bool
	// Measured is the last probe recorded on the node.
	Measured *ProbeRecord
	// Pods on the node; listed only while the node is ours and unfinished,
	// or once this run probed it.
	Pods []corev1.Pod
	// HolderTemplates are the pod templates of the DaemonSets whose pods
	// hold the device ("namespace/name"), read before the cordon: a
	// DaemonSet pod's own affinity names only its node, the template says
	// whether the deploy gates move it.
	HolderTemplates map[string]*corev1.PodTemplateSpec
	// Skip is why the node is now excluded (skip label, host-managed),
	// re-read at every observation: labels may change during a run.
	Skip string
	// OthersOut counts the other nodes rollbook has out of service
	// (read only before the node's own cordon, when a budget applies).
	OthersOut int
	// OthersOutLabels are those nodes' labels, for the per-label budgets
	// (--max-unavailable-per).
	OthersOutLabels []map[string]string
	// PDBs are the PodDisruptionBudgets of the namespaces of the pods the
	// drain would evict, read only for the cordon's decision (readPDBs).
	PDBs kube.PDBsByNamespace
	// PDBClaims are the disruptions of PDBs that other cordoned nodes'
	// drains will take first (read with PDBs, by a run).
	PDBClaims PDBClaims
	// Shared is the module another node published for this node's kernel
	// (kmd), read when a step asks for readShared and carried over after.
	Shared *SharedModule
	// Finished: the runbook's result is measured and recorded on the node,
	// so every disruptive step counts as done.
	Finished bool
}

// helperFacts is a node's helper pod for one (task, key), if any, and the
// result it reported.
type helperFacts struct {
	Pod    *corev1.Pod
	Result *nodeagent.Result
	// ResultErr says why a finished helper's result could not be read.
	ResultErr string
}

// finished reports a helper that ended (either way).
func (h helperFacts) finished() bool { return h.Pod != nil && kube.PodTerminal(h.Pod) }

// ok reports a helper that ended with a successful result.
func (h helperFacts) ok() bool { return h.finished() && h.Result != nil && h.Result.Success }

// reached reports a helper whose measured result reached want.
func (h helperFacts) reached(want string) bool { return h.ok() && h.Result.After == want }

func (f *Facts) ourCordon() bool { return kube.CordonStateOf(f.Node).Owner == f.Owner }

func (f *Facts) gatesPriorRecorded() bool {
	_, ok := f.Node.Annotations[AnnGatesPrior]
	return ok
}

// observer reads a node's Facts for one runbook.
type observer struct {
	cs       kubernetes.Interface
	owner    string
	helperNS string
	// helper and probe name the node's pods; probe may be nil.
	helper, probe func(node string) string
	// finished decides from the node (and its recorded measurements).
	finished func(n *corev1.Node) bool
	// skip, when set, says why the node is excluded now.
	skip func(n *corev1.Node) string
	// countOut, when set, has OthersOut read before the node's cordon:
	// once this run's probe is recorded (run), when the cordon is next.
	countOut bool
	run      string
	// shared, when set, reads Facts.Shared (readShared).
	shared func(ctx context.Context, f *Facts) (*SharedModule, error)
	// evicts, when set, names the pods the runbook's drain evicts: their
	// namespaces' PDBs are read before the cordon (readPDBs).
	evicts func(f *Facts, p *corev1.Pod) bool
	// daemonSets, when set, keeps the holders' DaemonSet templates read
	// before the cordon for a short while (several observations of one
	// node, and nodes of one fleet, share one read).
	daemonSets *templateCache
}

// The parts of Facts a step may ask for (runbook.Step.Reads).
const (
	// readNode: the node, with what is derived from it (Finished, Skip, …).
	readNode runbook.Parts = 1 << iota
	// readPods: the node's pods and helpers.
	readPods
	// readOthersOut: the nodes rollbook has out of service (before a cordon).
	readOthersOut
	// readShared: the module published for the node's kernel (kmd).
	readShared
	// readPDBs: the PDBs over the pods the drain would evict (before a cordon).
	readPDBs
)

func (o observer) observe(ctx context.Context, node string) (Facts, error) {
	return o.observeParts(ctx, node, runbook.AllParts, Facts{})
}

// observePartsOf is observeParts for a runbook's target.
func (o observer) observePartsOf(ctx context.Context, t runbook.Target, parts runbook.Parts, prev Facts) (Facts, error) {
	return o.observeParts(ctx, t.Name(), parts, prev)
}

// observeParts reads the parts asked for; the others keep prev's values,
// but the PDBs, which are read for the decision that asks for them only.
func (o observer) observeParts(ctx context.Context, node string, parts runbook.Parts, prev Facts) (Facts, error) {
	f, early, err := o.observeNodeParts(ctx, node, parts, prev)
	f.PDBs = nil
	if err != nil || parts&readPDBs == 0 {
		return f, err
	}
	return f, o.readPDBs(ctx, &f, early)
}

// cordonReads are a cordon's reads besides the node, started alongside its
// GET when the last observation says they will be needed. A cordon decides
// one at a time (runbook.Step.Exclusive), so reads in a row there were the
// serial section of a parallel roll: each added a round trip to every node's
// turn. Each is used only if the fresh node still calls for it.
type cordonReads struct {
	out *pending[othersOut] // nil: read when needed
	// outNames are the other nodes out of service this observation read
	// (nil: not read).
	outNames []string
	pdbs     *pending[kube.PDBsByNamespace]
	pods     []corev1.Pod // the pods pdbs was read for
	probe    string       // and the probe record that chose them
}

func (o observer) startCordonReads(ctx context.Context, name string, parts runbook.Parts, prev *Facts) cordonReads {
	var r cordonReads
	if prev.Node == nil || prev.Node.Name != name {
		return r
	}
	if parts&readOthersOut != 0 && o.needsOthersOut(prev) {
		r.out = start(func() (othersOut, error) { return othersOutOfService(ctx, o.cs, name) })
	}
	if parts&readPDBs != 0 && parts&readPods == 0 && o.needsPDBs(prev) {
		f, pods := *prev, prev.Pods
		r.pdbs, r.pods, r.probe = start(func() (kube.PDBsByNamespace, error) { return o.listPDBs(ctx, &f) }), pods,
			prev.Node.Annotations[AnnProbe]
	}
	return r
}

func (o observer) needsOthersOut(f *Facts) bool {
	return o.countOut && !f.ourCordon() && !f.Finished && (o.run == "" || f.measuredFresh(o.run))
}

func (o observer) needsPDBs(f *Facts) bool {
	// (preflight's observer has no owner, and no run: it reads them always)
	return o.evicts != nil && !f.Finished && (o.owner == "" || !f.ourCordon()) && (o.run == "" || f.measuredFresh(o.run))
}

// readPDBs reads the PDBs the node's drain would meet, once this run probed
// the node and until its cordon.
func (o observer) readPDBs(ctx context.Context, f *Facts, early cordonReads) error {
	if !o.needsPDBs(f) {
		return nil
	}
	var err error
	if early.pdbs != nil && samePods(early.pods, f.Pods) && early.probe == f.Node.Annotations[AnnProbe] {
		f.PDBs, err = early.pdbs.get()
	} else {
		f.PDBs, err = o.listPDBs(ctx, f)
	}
	if err != nil || o.owner == "" { // preflight's observer: no run, no cordon of its own to decide
		return err
	}
	f.PDBClaims, err = readPDBClaims(ctx, o.cs, f, o.evicts, early.outNames)
	return err
}

func (o observer) listPDBs(ctx context.Context, f *Facts) (kube.PDBsByNamespace, error) {
	return kube.ListPDBsFor(ctx, o.cs, f.Pods, func(p *corev1.Pod) bool { return o.evicts(f, p) })
}

// samePods reports whether a and b are the same list (not a re-read).
func samePods(a, b []corev1.Pod) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// pending is a read started in the background.
type pending[T any] struct {
	done chan struct{}
	v    T
	err  error
}

func start[T any](read func() (T, error)) *pending[T] {
	p := &pending[T]{done: make(chan struct{})}
	go func() { defer close(p.done); p.v, p.err = read() }()
	return p
}

func (p *pending[T]) get() (T, error) { <-p.done; return p.v, p.err }

func (o observer) observeNodeParts(ctx context.Context, node string, parts runbook.Parts, prev Facts,
) (f Facts, early cordonReads, err error) {
	name := strings.TrimPrefix(node, "node/")
	var n *corev1.Node
	if w := kube.NodeWritesOf(o.cs); w != nil {
		n = w.Take(name) // the step just wrote it: its response is the observation
	}
	if n == nil && parts&readNode == 0 && prev.Node != nil {
		f = prev // the node as last observed: the step asked not to re-read it
		if parts&readPods != 0 {
			return f, early, o.readPods(ctx, &f)
		}
		return f, early, nil
	}
	f = Facts{Owner: o.owner}
	if n == nil {
		// (a node just written is known: its reads follow from it exactly)
		early = o.startCordonReads(ctx, name, parts, &prev)
		if n, err = o.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return f, early, err
		}
	}
	f.Node = n
	f.Measured = probeRecordOf(n)
	f.Finished = o.finished(n)
	if o.skip != nil {
		f.Skip = o.skip(n)
	}
	f.Shared = prev.Shared
	// Once the node was probed (by this run, or by the one that cordoned
	// it): before, the kernel is not measured. What is read is this run's
	// own voucher, in memory.
	if parts&readShared != 0 && o.shared != nil && !f.Finished && f.Measured != nil {
		if f.Shared, err = o.shared(ctx, &f); err != nil {
			return f, early, err
		}
	}
	if parts&readOthersOut != 0 && o.needsOthersOut(&f) {
		var out othersOut
		if early.out != nil {
			out, err = early.out.get()
		} else {
			out, err = othersOutOfService(ctx, o.cs, n.Name)
		}
		if err != nil {
			return f, early, err
		}
		f.OthersOutLabels, early.outNames = out.labels, out.names
		f.OthersOut = len(f.OthersOutLabels)
	}
	if parts&readPods == 0 {
		f.Pods, f.Helpers, f.helpersRead, f.Helper, f.Probe = prev.Pods, prev.Helpers, prev.helpersRead, prev.Helper, prev.Probe
		return f, early, nil
	}
	return f, early, o.readPods(ctx, &f)
}

// readPods fills in the node's pods and helpers.
func (o observer) readPods(ctx context.Context, f *Facts) error {
	f.Pods, f.Helpers, f.helpersRead, f.Helper, f.Probe = nil, nil, false, helperFacts{}, helperFacts{}
	n := f.Node
	if o.helper == nil && o.probe == nil && (!f.ourCordon() || f.Finished) {
		return nil
	}
	// One list of the node's pods (cost follows the node, not the fleet)
	// finds the task's and the probe's helpers (pinned to it) and, while the
	// node is ours or probed by this run, what is on it.
	pods, err := kube.PodsOnNode(ctx, o.cs, n.Name)
	if err != nil {
		return err
	}
	var helpers []corev1.Pod
	for _, p := range pods {
		if p.Namespace == o.helperNS {
			helpers = append(helpers, p)
		}
	}
	f.Helper, f.Probe = helperNamed(helpers, o.helper, n.Name), helperNamed(helpers, o.probe, n.Name)
	f.Helpers, f.helpersRead = helpers, true
	// Once this run probed it, the probe's blockers judge the holders too
	// (before the cordon).
	if !f.Finished && (f.ourCordon() || f.measuredFresh(o.run)) {
		f.Pods = pods
	}
	if o.daemonSets != nil && !f.Finished && !f.ourCordon() && f.measuredFresh(o.run) {
		return o.readHolderTemplates(ctx, f)
	}
	return nil
}

// readHolderTemplates reads the templates of the DaemonSets whose pods hold
// the device on the node.
func (o observer) readHolderTemplates(ctx context.Context, f *Facts) error {
	for _, h := range f.deviceHolders() {
		ds := daemonSetOf(&h.Pod)
		if ds == "" {
			continue
		}
		key := h.Pod.Namespace + "/" + ds
		tpl, err := o.daemonSets.get(ctx, o.cs, h.Pod.Namespace, ds)
		if apierrors.IsNotFound(err) {
			continue // being deleted: its pods go too
		}
		if err != nil {
			return err
		}
		if f.HolderTemplates == nil {
			f.HolderTemplates = map[string]*corev1.PodTemplateSpec{}
		}
		f.HolderTemplates[key] = tpl
	}
	return nil
}

// templateCache keeps DaemonSet pod templates for templateTTL.
type templateCache struct {
	mu   sync.Mutex
	byNS map[string]cachedTemplate
}

type cachedTemplate struct {
	tpl *corev1.PodTemplateSpec
	at  time.Time
}

// templateTTL bounds how stale a template may be: a DaemonSet given a
// deploy gate mid-roll is seen within it.
const templateTTL = 20 * time.Second

func (c *templateCache) get(ctx context.Context, cs kubernetes.Interface, ns, name string) (*corev1.PodTemplateSpec, error) {
	key := ns + "/" + name
	c.mu.Lock()
	e, ok := c.byNS[key]
	c.mu.Unlock()
	if ok && time.Since(e.at) < templateTTL {
		return e.tpl, nil
	}
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.byNS == nil {
		c.byNS = map[string]cachedTemplate{}
	}
	c.byNS[key] = cachedTemplate{tpl: &ds.Spec.Template, at: time.Now()}
	c.mu.Unlock()
	return &ds.Spec.Template, nil
}

// othersOutOfService returns the labels of the nodes other than node that a
// rollbook run has out of service: a failed node that stays cordoned still
// uses its slot, whichever tt runbook left it.
func othersOutOfService(ctx context.Context, cs kubernetes.Interface, node string) (othersOut, error) {
	// Only cordoned nodes: the cost follows what is out, not the fleet. A
	// consistent read (not resourceVersion 0, which the watch cache may
	// answer from before the cordon this run just made): an undercount
	// would put one node too many out of service.
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.unschedulable", "true").String()})
	if err != nil {
		return othersOut{}, err
	}
	out := othersOut{labels: []map[string]string{}, names: []string{}}
	for i := range l.Items {
		if st := kube.CordonStateOf(&l.Items[i]); l.Items[i].Name != node && st.Cordoned && st.Owner != "" {
			out.labels = append(out.labels, l.Items[i].Labels)
			out.names = append(out.names, l.Items[i].Name)
		}
	}
	return out, nil
}

// othersOut are the other nodes rollbook has out of service.
type othersOut struct {
	labels []map[string]string
	names  []string
}

// withClockTakenAlong adds to a node write the removal of runbook rb's step
// clock when the node carries one: the step that just ended left it for the
// next write to take along (runbook: a done step's clock is not cleared by
// a write of its own).
func withClockTakenAlong(n *corev1.Node, rb string, annotations map[string]*string) map[string]*string {
	if _, ok := n.Annotations[runbook.TimerKey(rb)]; !ok {
		return annotations
	}
	if annotations == nil {
		annotations = map[string]*string{}
	}
	annotations[runbook.TimerKey(rb)] = nil
	return annotations
}

// firstLine is msg's first line, cut to at most n bytes.
func firstLine(msg string, n int) string {
	msg, _, _ = strings.Cut(strings.TrimSpace(msg), "\n")
	if len(msg) > n {
		msg = msg[:n] + "…"
	}
	return msg
}
