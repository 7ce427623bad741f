package substrate

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/sim/cluster"
)

// workerSyncer mirrors worker pods into the fake's Workers the way
// atecontroller's workersync does (§5.3, §6): a Ready pod with an IP
// registers as a Worker named by the pod's UID; a Terminating pod's worker
// drains, and its ateom (SIGTERM at the deletion request) keeps its actors
// suspendable for the eviction window, or until it exits early, then exits:
// the actors still awake then are lost, whether or not the pod object is
// gone (a finalizer may keep it). Once the pod is gone the worker is
// removed (DeleteWorker), crashing the actors still bound to it
// (SUSPENDED ones survive).
type workerSyncer struct {
	srv    *fakesubstrate.Server
	pods   corelisters.PodLister
	pools  cache.GenericLister
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	window time.Duration
	delay  time.Duration // registration lag after the pod is Ready
	// capacity is each worker's actors, reported capacityDelay after it
	// registers (era D; 0: at once).
	capacity      int
	capacityDelay time.Duration
	// ateomExit, when set, ends the window that soon after SIGTERM.
	ateomExit time.Duration
	changed   *changes
	logf      func(string, ...any)
	// exits holds the ateom exit timer per worker whose pod is Terminating.
	exits sync.Map // worker name → struct{}
	// byPod maps a pod's name to the UID its Worker was registered under;
	// only the single queue worker touches it.
	byPod map[cache.ObjectName]types.UID
}

func newWorkerSyncer(srv *fakesubstrate.Server, inf *watches, window, delay time.Duration, changed *changes,
	logf func(string, ...any)) *workerSyncer {
	s := &workerSyncer{
		srv: srv, pods: inf.pods.Lister(), pools: inf.pools.Lister(), window: window, delay: delay, changed: changed, logf: logf,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "workersync"}),
		byPod: map[cache.ObjectName]types.UID{},
	}
	enqueue := func(obj any) {
		if n, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			s.queue.Add(n)
		}
	}
	_, _ = inf.pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue})
	return s
}

func (s *workerSyncer) run(ctx context.Context) {
	defer s.queue.ShutDown()
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for s.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (s *workerSyncer) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.reconcile(ctx, key); err != nil {
		if ctx.Err() == nil {
			utilruntime.HandleError(fmt.Errorf("worker pod %s: %w", key, err))
		}
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

func (s *workerSyncer) reconcile(ctx context.Context, key cache.ObjectName) error {
	pod, err := s.pods.Pods(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	uid, tracked := s.byPod[key]
	if tracked && (pod == nil || pod.UID != uid) {
		s.gone(ctx, string(uid), key)
		delete(s.byPod, key)
		tracked = false
	}
	switch {
	case pod == nil:
		return nil
	case pod.DeletionTimestamp != nil:
		// Checked before readiness: a Terminating pod may lose its IP.
		if tracked {
			s.drain(string(uid))
			s.exitLater(ctx, string(uid), pod)
		}
		return nil
	case tracked || pod.Status.PodIP == "" || !podReady(pod):
		return nil
	}
	if wait := s.registerIn(pod); wait > 0 {
		s.queue.AddAfter(key, wait)
		return nil
	}
	obj, err := s.pools.ByNamespace(pod.Namespace).Get(pod.Labels[PoolLabel])
	if err != nil {
		return fmt.Errorf("pool of pod %s: %w", key, err) // retried: the pool cache may lag
	}
	pool, err := poolFromObject(obj)
	if err != nil {
		return err
	}
	w := WorkerFor(pod, pool)
	w.Capacity = s.capacity
	w.CapacityPending = s.capacityDelay > 0 && s.srv.Era() == fakesubstrate.EraD
	if err := s.srv.AddWorker(w); err != nil {
		return err
	}
	if w.CapacityPending {
		time.AfterFunc(s.capacityDelay, func() {
			if s.srv.ReportCapacity(w.Name) == nil {
				s.changed.fire()
			}
		})
	}
	s.byPod[key] = pod.UID
	klog.Infof("substrate: worker %s registered (pod %s/%s on %s)", pod.UID, pod.Namespace, pod.Name, pod.Spec.NodeName)
	s.changed.fire()
	return nil
}

// WorkerFor is the Worker the syncer registers for a Ready pod of pool:
// named by the pod UID, labelled with the pool's metadata.labels (which
// actors are matched against).
func WorkerFor(pod *corev1.Pod, pool *WorkerPool) fakesubstrate.Worker {
	var ips []string
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []string{pod.Status.PodIP}
	}
	return fakesubstrate.Worker{
		Name: string(pod.UID), Namespace: pod.Namespace, Pool: pool.Name, Pod: pod.Name,
		Node: pod.Spec.NodeName, IPs: ips, SandboxClass: pool.SandboxClassName(), Labels: pool.Labels,
		Dataplane: pool.Spec.Template.NodeSelector[VersionLabel],
	}
}

func (s *workerSyncer) drain(worker string) {
	if err := s.srv.MarkWorkerDraining(worker); err == nil {
		s.changed.fire()
	}
}

// ateomExitAt is when the ateom of a Terminating worker pod exits with its
// actors still awake: the eviction window (or its early exit) counted from
// SIGTERM, the deletion request, not from when the syncer noticed; the
// kubelet kills it at the deletionTimestamp at the latest.
func (s *workerSyncer) ateomExitAt(pod *corev1.Pod) (time.Time, string) {
	start := cluster.DeletionRequested(pod)
	at, why := start.Add(s.window), "its eviction window ("+s.window.String()+" from SIGTERM) ended"
	if s.ateomExit > 0 && s.ateomExit < s.window {
		at, why = start.Add(s.ateomExit), "its ateom exited "+s.ateomExit.String()+" after SIGTERM"
	}
	if end := pod.DeletionTimestamp.Time; end.Before(at) {
		at, why = end, "the kubelet killed it at the end of the pod's grace period"
	}
	return at, why
}

// exitLater loses the worker's awake actors when its ateom exits (once per
// worker).
func (s *workerSyncer) exitLater(ctx context.Context, worker string, pod *corev1.Pod) {
	if _, dup := s.exits.LoadOrStore(worker, struct{}{}); dup {
		return
	}
	at, why := s.ateomExitAt(pod)
	time.AfterFunc(time.Until(at), func() {
		if ctx.Err() != nil {
			return
		}
		why := fmt.Sprintf("worker %s: pod %s/%s deleted, %s", worker, pod.Namespace, pod.Name, why)
		for _, a := range s.srv.LoseActorsOnWorker(worker, why) {
			s.logf("substrate: actor %s/%s CRASHED: %s", a.Atespace, a.Name, why)
		}
		s.changed.fire()
	})
}

// holdExit keeps a deleted worker pod Terminating while its ateom runs: up
// to its exit, as long as an actor on its worker is awake (the kubelet
// then finishes the deletion).
func (s *workerSyncer) holdExit(p *corev1.Pod) (time.Duration, string) {
	if p.Labels[PoolLabel] == "" || p.DeletionTimestamp == nil || len(s.srv.AwakeOn(string(p.UID))) == 0 {
		return 0, ""
	}
	at, _ := s.ateomExitAt(p)
	return time.Until(at), "ateom of worker " + string(p.UID) + " holds its awake actors' eviction window"
}

// gone is the syncer's DeleteWorker once the worker's pod is gone: its
// ateom exited with it, so the actors still awake are lost now.
func (s *workerSyncer) gone(_ context.Context, worker string, pod cache.ObjectName) {
	s.exits.Delete(worker)
	crashed, err := s.srv.RemoveWorker(worker)
	if err != nil {
		return // already removed
	}
	klog.Infof("substrate: worker pod %s gone; worker %s removed", pod, worker)
	for _, a := range crashed {
		s.logf("substrate: actor %s/%s CRASHED: its worker %s was deleted while it was awake", a.Atespace, a.Name, worker)
	}
	s.changed.fire()
}

// RegisterDelayAnnotation on a worker pod overrides the registration lag
// for that pod (a Go duration): tests hold a pod unregistered with it.
const RegisterDelayAnnotation = "sim.rollbook.dev/register-delay"

// registerIn says how long the Ready pod still waits before its worker
// registers: the syncer lags behind the pod on a real install.
func (s *workerSyncer) registerIn(pod *corev1.Pod) time.Duration {
	delay := s.delay
	if v, ok := pod.Annotations[RegisterDelayAnnotation]; ok {
		if d, err := time.ParseDuration(v); err == nil {
			delay = d
		}
	}
	if delay <= 0 {
		return 0
	}
	since := time.Duration(0)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			since = time.Since(c.LastTransitionTime.Time)
		}
	}
	return max(delay-since, 0)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
