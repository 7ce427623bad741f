package kube

import (
	"context"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// NodeWrites keeps, per node, the node as the API server returned it from
// a runbook's latest write (its own patches, the cordon, the engine's step
// clock). The observation that follows a write reads the node from there:
// a write's response is the node as it is once the write is in, so the GET
// after it is saved ("act from the observation"). Only the node is reused.
// Both plugins' runbooks use it (RememberNodeWrites).
type NodeWrites struct {
	mu    sync.Mutex
	nodes map[string]*corev1.Node // written since the last observation
	seen  map[string]string       // resourceVersion of the newest node observed
}

// put remembers n (nil forgets name: the write's outcome is unknown).
func (w *NodeWrites) put(name string, n *corev1.Node, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil || n == nil {
		delete(w.nodes, name)
		return
	}
	if w.nodes == nil {
		w.nodes = map[string]*corev1.Node{}
	}
	// Writes overlap (the step clock is written while a step acts): a
	// response that arrives late but carries an older version must not
	// replace a newer one.
	if prev, ok := w.nodes[name]; ok && olderVersion(n.ResourceVersion, prev.ResourceVersion) {
		return
	}
	w.nodes[name] = n.DeepCopy()
}

// Take returns the node written since the last take, if it is newer than
// the last node observed, and forgets it.
func (w *NodeWrites) Take(name string) *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.nodes[name]
	delete(w.nodes, name)
	if n == nil || !olderVersion(w.seen[name], n.ResourceVersion) {
		return nil
	}
	return n
}

// Observed notes that n was observed (read, or taken from a write).
func (w *NodeWrites) Observed(n *corev1.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]string{}
	}
	if prev, ok := w.seen[n.Name]; !ok || olderVersion(prev, n.ResourceVersion) {
		w.seen[n.Name] = n.ResourceVersion
	}
}

// Newest returns n, or the node as a later write returned it: the base a
// patch with a resourceVersion precondition should start from, so that our
// own write in between (the step clock) costs no conflict and re-read.
func (w *NodeWrites) Newest(n *corev1.Node) *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := w.nodes[n.Name]; m != nil && olderVersion(n.ResourceVersion, m.ResourceVersion) {
		return m.DeepCopy()
	}
	return n
}

// olderVersion reports whether resource version a is older than b; versions
// that are not numbers (not etcd's) are never called older, and "" is
// older than any number.
func olderVersion(a, b string) bool {
	y, errB := strconv.ParseUint(b, 10, 64)
	if a == "" {
		return errB == nil
	}
	x, errA := strconv.ParseUint(a, 10, 64)
	return errA == nil && errB == nil && x < y
}

// rememberingClient is cs whose node writes are remembered in writes.
type rememberingClient struct {
	kubernetes.Interface
	writes *NodeWrites
}

// RememberNodeWrites wraps cs (once) so its node writes are remembered
// (NodeWritesOf).
func RememberNodeWrites(cs kubernetes.Interface) kubernetes.Interface {
	if r, ok := cs.(rememberingClient); ok {
		return r
	}
	return rememberingClient{Interface: cs, writes: &NodeWrites{}}
}

// NodeWritesOf returns the memory of cs's node writes, nil if it keeps none.
func NodeWritesOf(cs kubernetes.Interface) *NodeWrites {
	if r, ok := cs.(rememberingClient); ok {
		return r.writes
	}
	return nil
}

func (c rememberingClient) CoreV1() corev1client.CoreV1Interface {
	return rememberingCore{CoreV1Interface: c.Interface.CoreV1(), writes: c.writes}
}

type rememberingCore struct {
	corev1client.CoreV1Interface
	writes *NodeWrites
}

func (c rememberingCore) Nodes() corev1client.NodeInterface {
	return rememberingNodes{NodeInterface: c.CoreV1Interface.Nodes(), writes: c.writes}
}

type rememberingNodes struct {
	corev1client.NodeInterface
	writes *NodeWrites
}

func (n rememberingNodes) Update(ctx context.Context, node *corev1.Node, o metav1.UpdateOptions) (*corev1.Node, error) {
	out, err := n.NodeInterface.Update(ctx, node, o)
	n.writes.put(node.Name, out, err)
	return out, err
}

func (n rememberingNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions,
	sub ...string) (*corev1.Node, error) {
	out, err := n.NodeInterface.Patch(ctx, name, pt, data, o, sub...)
	n.writes.put(name, out, err)
	return out, err
}

// The writes below are not remembered; each forgets what was, so no older
// response is taken for an observation after them.

func (n rememberingNodes) UpdateStatus(ctx context.Context, node *corev1.Node, o metav1.UpdateOptions) (*corev1.Node, error) {
	out, err := n.NodeInterface.UpdateStatus(ctx, node, o)
	n.writes.put(node.Name, nil, nil)
	return out, err
}

func (n rememberingNodes) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	err := n.NodeInterface.Delete(ctx, name, o)
	n.writes.put(name, nil, nil)
	return err
}
