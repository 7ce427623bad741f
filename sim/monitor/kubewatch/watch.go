package kubewatch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/sim/monitor"
	"github.com/rollbook/rollbook/sim/substrate"
)

// Config of the watchers.
type Config struct {
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	Monitor    *monitor.Monitor
	Logf       func(format string, a ...any)
	// CordonGrace is how long a rollbook cordon may outlive every run
	// (default 5s); SkewGrace how long a worker may stay next to an atelet
	// of another version (default 15s); Tick how often the state rules are
	// re-evaluated (default 500ms).
	CordonGrace, SkewGrace, Tick time.Duration
	// workerLag delays each worker-pod event's handling (tests only): a
	// lagging handler sees an informer store that is ahead of its event.
	workerLag time.Duration
}

func (c *Config) defaults() {
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.CordonGrace == 0 {
		c.CordonGrace = 5 * time.Second
	}
	if c.SkewGrace == 0 {
		c.SkewGrace = 15 * time.Second
	}
	if c.Tick == 0 {
		c.Tick = 500 * time.Millisecond
	}
}

type watcher struct {
	cfg     Config
	nodes   cache.SharedIndexInformer
	leases  []cache.SharedIndexInformer
	workers cache.SharedIndexInformer
	atelets cache.SharedIndexInformer
	rss     cache.SharedIndexInformer

	mu      sync.Mutex // guards the episodes and serialises reports
	outNow  bool       // a too-many-out episode is open
	cordons *episodes
	skewEps *episodes
	// recoveries are the spans, as this monitor saw them, in which a held
	// Lease declared each node under recovery. A deletion is judged by the
	// declaration in force when it was requested: the Lease's and the
	// pods' watches are not ordered, so a declaration lifted right after
	// the last delete can be seen before that pod's Terminating update.
	recoveries map[string][]span
}

// span is one declaration's observed life; to is zero while it lasts.
type span struct{ from, to time.Time }

// lateDeclaration is how long a deletion no declaration covers waits for
// one seen late (the other watch's lag) before it is reported; it also
// covers deletionTimestamp's truncation to the second.
const lateDeclaration = 2 * time.Second

// Start runs the watchers until ctx ends and returns once their caches are
// synced, so everything after it is observed.
func Start(ctx context.Context, cfg Config) error {
	cfg.defaults()
	w := &watcher{cfg: cfg, cordons: newEpisodes(), skewEps: newEpisodes(), recoveries: map[string][]span{}}
	cs := cfg.Client
	all := informers.NewSharedInformerFactory(cs, 0)
	w.nodes = all.Core().V1().Nodes().Informer()
	var factories []informers.SharedInformerFactory
	factories = append(factories, all)
	for _, name := range LeaseNames {
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "metadata.name=" + name
		}))
		w.leases = append(w.leases, f.Coordination().V1().Leases().Informer())
		factories = append(factories, f)
	}
	byPool := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = substrate.PoolLabel
	}))
	w.workers = byPool.Core().V1().Pods().Informer()
	w.rss = byPool.Apps().V1().ReplicaSets().Informer()
	atelet := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = substrate.AppLabel + "=" + substrate.AteletApp
	}))
	w.atelets = atelet.Core().V1().Pods().Informer()
	factories = append(factories, byPool, atelet)

	state := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.checkState(time.Now()) },
		UpdateFunc: func(any, any) { w.checkState(time.Now()) },
		DeleteFunc: func(any) { w.checkState(time.Now()) },
	}
	_, _ = w.nodes.AddEventHandler(state)
	declared := func(any) { w.trackRecoveries(time.Now()) }
	for _, l := range w.leases {
		_, _ = l.AddEventHandler(state)
		_, _ = l.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: declared,
			UpdateFunc: func(_, n any) { declared(n) }, DeleteFunc: declared})
	}
	live := liveReplicas{}
	_, _ = w.workers.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { live.observe(obj.(*corev1.Pod), false) },
		UpdateFunc: func(o, n any) {
			op, np := o.(*corev1.Pod), n.(*corev1.Pod)
			time.Sleep(w.cfg.workerLag)
			if owningReplicaSet(op) != owningReplicaSet(np) {
				live.observe(op, true) // orphaned or adopted: it leaves its old set
			}
			before := live.observe(np, false)
			if op.DeletionTimestamp == nil && np.DeletionTimestamp != nil {
				w.podDeleted(np, before)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			before := live.observe(p, true)
			if p.DeletionTimestamp == nil {
				w.podDeleted(p, before) // deleted at once: no Terminating update was seen
			}
		},
	})
	synced := []cache.InformerSynced{w.nodes.HasSynced, w.workers.HasSynced, w.atelets.HasSynced, w.rss.HasSynced}
	for _, l := range w.leases {
		synced = append(synced, l.HasSynced)
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("invariant monitor: caches did not sync: %w", ctx.Err())
	}
	go w.startPoolsWhenDefined(ctx)
	go func() {
		t := time.NewTicker(cfg.Tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				w.checkState(now)
			}
		}
	}()
	return nil
}

// startPoolsWhenDefined watches WorkerPools once their CRD is served;
// scenarios without the substrate never define it.
func (w *watcher) startPoolsWhenDefined(ctx context.Context) {
	gv := substrate.GVRWorkerPool.GroupVersion().String()
	for {
		if _, err := w.cfg.Client.Discovery().ServerResourcesForGroupVersion(gv); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	dyn, err := dynamic.NewForConfig(w.cfg.RESTConfig)
	if err != nil {
		w.cfg.Logf("invariant monitor: cannot watch WorkerPools: %v", err)
		return
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := f.ForResource(substrate.GVRWorkerPool).Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) { w.poolChanged(poolOf(o), poolOf(n)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			w.poolChanged(poolOf(obj), nil)
		},
	})
	f.Start(ctx.Done())
}

func poolOf(obj any) *pool {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	p, err := substrate.PoolFromUnstructured(u)
	if err != nil {
		return nil
	}
	return &pool{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation, Replicas: int64(p.Spec.Replicas),
		Deleting: p.DeletionTimestamp != nil}
}

func (w *watcher) report(rule, object, detail string) {
	w.cfg.Logf("invariant monitor: %s %s: %s", rule, object, detail)
	w.cfg.Monitor.ReportEach(rule, object, detail)
}

func listOf[T any](inf cache.SharedIndexInformer) []T {
	var out []T
	for _, o := range inf.GetStore().List() {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func (w *watcher) node(name string) *corev1.Node {
	o, ok, _ := w.nodes.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	return o.(*corev1.Node)
}

// fresh reads the nodes and rollbook's Leases from the API server, not the
// caches; ok false when it cannot (it is down).
func (w *watcher) fresh() (nodes []*corev1.Node, leases []*coordv1.Lease, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nl, err := w.cfg.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, false
	}
	for i := range nl.Items {
		nodes = append(nodes, &nl.Items[i])
	}
	for _, name := range LeaseNames {
		ll, err := w.cfg.Client.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			return nil, nil, false
		}
		for i := range ll.Items {
			leases = append(leases, &ll.Items[i])
		}
	}
	return nodes, leases, true
}

// checkState evaluates the rules on the current state: out of service,
// cordons left behind, version skew.
func (w *watcher) checkState(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	nodes := listOf[*corev1.Node](w.nodes)
	var leases []*coordv1.Lease
	for _, l := range w.leases {
		leases = append(leases, listOf[*coordv1.Lease](l)...)
	}
	_, detail := tooManyOut(nodes, leases, now)
	if detail != "" && !w.outNow {
		w.report(monitor.RuleTooManyOut, "nodes", detail)
	}
	w.outNow = detail != ""

	// The caches may lag the API server (a watch re-established after an
	// apiserver restart): a Lease renewed since looks expired by now. A
	// cordon left behind for the grace holds only on a fresh read.
	left := cordonsLeft(nodes, leases, now)
	if over := w.cordons.observe(now, left, w.cfg.CordonGrace); len(over) > 0 {
		fn, fl, ok := w.fresh()
		var still map[string]string
		if ok {
			still = cordonsLeft(fn, fl, now)
		}
		for _, n := range over {
			if why, ok := still[n]; ok {
				w.report(monitor.RuleCordonLeft, "node/"+n, fmt.Sprintf("%s for %s", why, w.cfg.CordonGrace))
			} else {
				w.cordons.reopen(n) // not so on a fresh read: watched again
			}
		}
	}
	sk := skews(listOf[*corev1.Pod](w.workers), listOf[*corev1.Pod](w.atelets))
	for _, k := range w.skewEps.observe(now, sk, w.cfg.SkewGrace) {
		workerPod, _, _ := strings.Cut(k, " ")
		w.report(monitor.RuleVersionSkew, "pod/"+workerPod, fmt.Sprintf("%s for %s", sk[k], w.cfg.SkewGrace))
	}
}

// podDeleted checks a worker pod's deletion against the node's version;
// live is how many of its ReplicaSet's pods were not being deleted just
// before, p included.
func (w *watcher) podDeleted(p *corev1.Pod, live int) {
	node := w.node(p.Spec.NodeName)
	replicaSet := func() *appsv1.ReplicaSet {
		name := owningReplicaSet(p)
		if name == "" {
			return nil
		}
		if o, ok, _ := w.rss.GetStore().GetByKey(p.Namespace + "/" + name); ok {
			return o.(*appsv1.ReplicaSet)
		}
		return nil
	}
	if oldPodDeleted(p, node, replicaSet(), live) == "" {
		return
	}
	at := time.Now()
	if p.DeletionTimestamp != nil {
		at = p.DeletionTimestamp.Time
	}
	judge := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.refreshRecoveries(time.Now()) // a Lease that expired since says so only here
		return w.recoveringAt(p.Spec.NodeName, at)
	}
	if judge() {
		return
	}
	time.AfterFunc(lateDeclaration, func() {
		if judge() {
			return
		}
		// The ReplicaSet's watch is not ordered with the pods': a
		// scale-down that removed p may be seen only now.
		d := oldPodDeleted(p, node, replicaSet(), live)
		if d == "" {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.report(monitor.RuleOldPodBeforeFlip, "pod/"+p.Namespace+"/"+p.Name, d)
	})
}

// trackRecoveries opens a span for each node a held Lease now declares
// under recovery and closes the spans of the others.
func (w *watcher) trackRecoveries(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refreshRecoveries(now)
}

func (w *watcher) refreshRecoveries(now time.Time) {
	var leases []*coordv1.Lease
	for _, l := range w.leases {
		leases = append(leases, listOf[*coordv1.Lease](l)...)
	}
	now = now.Truncate(0)
	for _, n := range declaredNodes(leases, now) {
		if sp := w.recoveries[n]; len(sp) == 0 || !sp[len(sp)-1].to.IsZero() {
			w.recoveries[n] = append(sp, span{from: now})
		}
	}
	for n, sp := range w.recoveries {
		if last := &sp[len(sp)-1]; last.to.IsZero() && !recovering(leases, n, now) {
			last.to = now
		}
	}
}

// recoveringAt says whether a declaration covered node at t (seen up to
// lateDeclaration after t started: deletionTimestamp is kept to the
// second and the Lease's watch may lag).
func (w *watcher) recoveringAt(node string, t time.Time) bool {
	for _, s := range w.recoveries[node] {
		if !t.Before(s.from.Add(-lateDeclaration)) && (s.to.IsZero() || !t.After(s.to)) {
			return true
		}
	}
	return false
}

// poolChanged checks an update (cur nil: deletion) of a WorkerPool.
func (w *watcher) poolChanged(old, cur *pool) {
	if old == nil {
		return
	}
	sel := labels.SelectorFromSet(labels.Set{substrate.PoolLabel: old.Name})
	var pods []*corev1.Pod
	for _, p := range listOf[*corev1.Pod](w.workers) {
		if p.Namespace == old.Namespace && sel.Matches(labels.Set(p.Labels)) {
			pods = append(pods, p)
		}
	}
	nodes := map[string]*corev1.Node{}
	for _, n := range listOf[*corev1.Node](w.nodes) {
		nodes[n.Name] = n
	}
	d := poolChange(old, cur, true)
	if d == "" {
		return
	}
	if !serving(pods, nodes) {
		// Said, not reported: when this rule misses, the log tells why.
		var seen []string
		for _, p := range pods {
			seen = append(seen, fmt.Sprintf("%s %s on %s (pinned %q, deleting %t)", p.Name, p.Status.Phase, p.Spec.NodeName, pin(p), p.DeletionTimestamp != nil))
		}
		w.cfg.Logf("invariant monitor: workerpool %s/%s %s while not serving: %s", old.Namespace, old.Name, d, strings.Join(seen, "; "))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.report(monitor.RuleServingPoolEdit, "workerpool/"+old.Namespace+"/"+old.Name, d)
}
