package substrate

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/pkg/atestate"
	"github.com/rollbook/rollbook/sim/cluster"
)

// TestOnCluster runs the substrate against a real control plane: a
// WorkerPool becomes a Deployment whose Ready pods register as Workers, and
// deleting worker pods crashes the RUNNING actor after the eviction window
// while the one suspended inside the window survives.
func TestOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := cluster.Up(ctx, cluster.Options{Dir: dir, Nodes: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	const window = 3 * time.Second
	sub, err := Start(ctx, Config{Dir: dir, RESTConfig: c.RESTConfig, Client: c.Client, Logf: t.Logf,
		Options: Options{EvictionWindow: window}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(runCtx) }()
	defer func() { stop(); <-done }()

	if n, err := LabelUnlabelledNodes(ctx, c.Client, "v1"); err != nil || n != 2 {
		t.Fatalf("labelled %d nodes: %v", n, err)
	}
	dyn := dynamic.NewForConfigOrDie(c.RESTConfig)
	pool := createTestPool(ctx, t, c, dyn)

	if err := WaitPoolsReady(ctx, dyn, pool.Namespace, pool.Name); err != nil {
		t.Fatal(err)
	}
	dep, err := c.Client.AppsV1().Deployments(pool.Namespace).Get(ctx, pool.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Labels[PoolLabel] != pool.Name || dep.Spec.Template.Spec.NodeSelector[VersionLabel] != "v1" ||
		len(dep.OwnerReferences) != 1 || dep.OwnerReferences[0].Kind != "WorkerPool" {
		t.Fatalf("rendered Deployment: labels %v nodeSelector %v owners %v", dep.Labels, dep.Spec.Template.Spec.NodeSelector,
			dep.OwnerReferences)
	}
	pods, err := c.Client.CoreV1().Pods(pool.Namespace).List(ctx, metav1.ListOptions{LabelSelector: PoolSelector(pool.Name)})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods: %d %v", len(pods.Items), err)
	}
	if err := sub.WaitFor(ctx, "2 workers", func(ws []fakesubstrate.Worker,
		_ []fakesubstrate.Actor) bool {
		return len(ws) == 2
	}); err != nil {
		t.Fatal(err)
	}
	byUID := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		byUID[string(p.UID)] = p
	}
	workers := sub.Server.Workers()
	for _, w := range workers {
		p, ok := byUID[w.Name]
		if !ok || w.Node != p.Spec.NodeName || w.Pod != p.Name || w.Pool != pool.Name || w.Labels["size"] != "small" ||
			w.State != atestate.WorkerActive {
			t.Fatalf("worker %+v does not match a pod", w)
		}
	}

	awake := fakesubstrate.Actor{Atespace: "demo", Name: "awake", State: atestate.ActorRunning, Worker: workers[0].Name}
	sleepy := fakesubstrate.Actor{Atespace: "demo", Name: "sleepy", State: atestate.ActorRunning, Worker: workers[1].Name}
	for _, a := range []fakesubstrate.Actor{awake, sleepy} {
		if err := sub.Server.AddActor(a); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	for _, p := range pods.Items {
		if err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.WaitFor(ctx, "old workers DRAINING", func(ws []fakesubstrate.Worker, _ []fakesubstrate.Actor) bool {
		n := 0
		for _, w := range ws {
			if (w.Name == workers[0].Name || w.Name == workers[1].Name) && w.State == atestate.WorkerDraining {
				n++
			}
		}
		return n == 2
	}); err != nil {
		t.Fatal(err)
	}
	// Inside the window: suspend one actor, as a person or the roll would.
	if a, err := sub.Server.SuspendActor("demo", "sleepy"); err != nil || a.State != atestate.ActorSuspended {
		t.Fatalf("suspend inside the window: %+v %v", a, err)
	}
	if a, _ := sub.Server.GetActor("demo", "awake"); a.State != atestate.ActorRunning {
		t.Fatalf("awake crashed before the window ended: %+v", a)
	}
	if err := sub.WaitFor(ctx, "old workers removed", func(ws []fakesubstrate.Worker, _ []fakesubstrate.Actor) bool {
		for _, w := range ws {
			if w.Name == workers[0].Name || w.Name == workers[1].Name {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	// A lower bound on a duration of the simulated world (the eviction
	// window): a slow machine only makes it larger, so it fails only if the
	// sim removes the workers early.
	if el := time.Since(deleted); el < window {
		t.Errorf("workers removed after %s, before the %s window", el, window)
	}
	a, _ := sub.Server.GetActor("demo", "awake")
	if a.State != atestate.ActorCrashed || a.AssignedNode != workers[0].Node || a.Worker != "" {
		t.Errorf("awake: want CRASHED on %s, got %+v", workers[0].Node, a)
	}
	if s, _ := sub.Server.GetActor("demo", "sleepy"); s.State != atestate.ActorSuspended {
		t.Errorf("sleepy: want SUSPENDED, got %+v", s)
	}
	// The Deployment replaces the pods; their new UIDs register as new workers.
	if err := sub.WaitFor(ctx, "replacement workers", func(ws []fakesubstrate.Worker, _ []fakesubstrate.Actor) bool {
		return len(ws) == 2
	}); err != nil {
		t.Fatal(err)
	}
}

func createTestPool(ctx context.Context, t *testing.T, c *cluster.Cluster, dyn dynamic.Interface) *WorkerPool {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ate-workers"}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &WorkerPool{}
	p.Name, p.Namespace, p.Labels = "python-small", "ate-workers", map[string]string{"size": "small"}
	p.Spec = WorkerPoolSpec{Replicas: 2, WorkerImage: "example.com/ateom@sha256:00",
		SandboxClasses: []SandboxClass{{Name: "gvisor"}},
		Template:       PoolTemplate{NodeSelector: map[string]string{VersionLabel: "v1"}}}
	u, err := p.ToUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(GVRWorkerPool).Namespace(p.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}
