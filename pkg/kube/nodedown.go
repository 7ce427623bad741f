package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/paced"
)

// NodeDownGrace is how long a node must stay NotReady before a wait that
// depends on it gives up: a wait for a pod on a node whose kubelet is down
// would otherwise only end with its step's budget (minutes).
const NodeDownGrace = 3 * time.Second

// NodeNotReadyError names a node a wait stopped on.
type NodeNotReadyError struct {
	Node string
	Why  string
}

func (e *NodeNotReadyError) Error() string {
	return fmt.Sprintf("node %s is NotReady (%s)", e.Node, e.Why)
}

// NodeNotReadyReason reports a node whose Ready condition is False or
// Unknown, and why. A node without the condition (not yet reported, or an
// object built in a test) does not count: only a kubelet's own report or
// the node controller's verdict stops a wait.
func NodeNotReadyReason(n *corev1.Node) (string, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message), true
		}
	}
	return "", false
}

// CancelOnNodeDown checks every second, until ctx ends, the node nodeOf
// names ("" = nothing to watch now) and cancels ctx with a
// *NodeNotReadyError once that node has been NotReady for NodeDownGrace.
// Run it in its own goroutine. The node is watched, not read each second:
// from the first check (a wait that ends within a second costs nothing)
// one watch request follows it however long the wait lasts, where a read
// per second cost a long drain or helper hundreds. The watch is paced: a
// cost of a wait that lasts, not of the node.
func CancelOnNodeDown(ctx context.Context, cancel context.CancelCauseFunc, cs kubernetes.Interface,
	nodeOf func(ctx context.Context) string) {
	var since time.Time
	var w *nodeWatch
	defer func() { w.close() }()
	_ = wait.PollUntilContextCancel(ctx, time.Second, false, func(ctx context.Context) (bool, error) {
		name := nodeOf(ctx)
		if name == "" {
			since = time.Time{}
			return false, nil
		}
		if w == nil || w.name != name || w.ended() {
			w.close()
			w = watchNode(paced.Mark(ctx), cs, name)
		}
		n := w.latest()
		if n == nil {
			return false, nil // not seen yet
		}
		why, down := NodeNotReadyReason(n)
		switch {
		case !down:
			since = time.Time{}
			return false, nil
		case since.IsZero():
			since = time.Now()
			return false, nil
		case time.Since(since) < NodeDownGrace:
			return false, nil
		}
		cancel(&NodeNotReadyError{Node: name, Why: why})
		return true, nil
	})
}

// nodeWatch keeps the latest state of one node from a watch; a watch that
// ends is opened again by its user.
type nodeWatch struct {
	name   string
	stop   context.CancelFunc
	mu     sync.Mutex
	node   *corev1.Node
	isOver bool
}

// watchNode starts a watch of the node name. With no resourceVersion the
// server first sends the node as it is now, so one request serves both.
func watchNode(ctx context.Context, cs kubernetes.Interface, name string) *nodeWatch {
	ctx, stop := context.WithCancel(ctx)
	w := &nodeWatch{name: name, stop: stop}
	watcher, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		w.isOver = true
		return w
	}
	go func() {
		defer watcher.Stop()
		for ev := range watcher.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				break // an error event ends the watch
			}
			w.mu.Lock()
			w.node = n
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.isOver = true
		w.mu.Unlock()
	}()
	return w
}

func (w *nodeWatch) latest() *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node
}

func (w *nodeWatch) ended() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isOver
}

func (w *nodeWatch) close() {
	if w != nil {
		w.stop()
	}
}

// WaitForNodeReady watches the node until its Ready condition is True.
func WaitForNodeReady(ctx context.Context, cs kubernetes.Interface, name string) error {
	nodes := cs.CoreV1().Nodes()
	lw := nameSelected(name, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) },
		nodes.Watch)
	_, err := waitFor(ctx, lw, &corev1.Node{}, nil, func(n *corev1.Node, deleted bool) (bool, error) {
		if deleted {
			return false, ErrGone
		}
		return NodeReady(n), nil
	})
	return err
}
