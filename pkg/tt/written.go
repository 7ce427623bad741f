package tt

import (
	"context"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// nodeWrites keeps, per node, the node as the API server returned it from
// rollbook's latest write. The observation that follows a step which wrote
// the node reads it from there: a write's response is as fresh as a read
// made after it, so the read is saved ("act from the observation").
type nodeWrites struct {
	mu    sync.Mutex
	nodes map[string]*corev1.Node // written since the last observation
}

// put remembers n (nil forgets name: the write's outcome is unknown).
func (w *nodeWrites) put(name string, n *corev1.Node, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil || n == nil {
		delete(w.nodes, name)
		return
	}
	if w.nodes == nil {
		w.nodes = map[string]*corev1.Node{}
	}
	// Writes may overlap (a step clock is written while the step acts): a
	// response that arrives late but carries an older version must not
	// replace a newer one.
	if prev, ok := w.nodes[name]; ok && olderVersion(n.ResourceVersion, prev.ResourceVersion) {
		return
	}
	w.nodes[name] = n.DeepCopy()
}

// olderVersion reports whether resource version a is older than b; versions
// that are not numbers (not etcd's) are never called older.
func olderVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x < y
}

// take returns the node written since the last take, if any.
func (w *nodeWrites) take(name string) *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.nodes[name]
	delete(w.nodes, name)
	return n
}

// rememberingClient is cs whose node writes are remembered in writes.
type rememberingClient struct {
	kubernetes.Interface
	writes *nodeWrites
}

// rememberNodeWrites wraps cs (once) so its node writes are remembered.
func rememberNodeWrites(cs kubernetes.Interface) rememberingClient {
	if r, ok := cs.(rememberingClient); ok {
		return r
	}
	return rememberingClient{Interface: cs, writes: &nodeWrites{}}
}

// written is the node as rollbook's last write since the last call left it.
func (c rememberingClient) written(name string) *corev1.Node { return c.writes.take(name) }

func (c rememberingClient) CoreV1() corev1client.CoreV1Interface {
	return rememberingCore{CoreV1Interface: c.Interface.CoreV1(), writes: c.writes}
}

type rememberingCore struct {
	corev1client.CoreV1Interface
	writes *nodeWrites
}

func (c rememberingCore) Nodes() corev1client.NodeInterface {
	return rememberingNodes{NodeInterface: c.CoreV1Interface.Nodes(), writes: c.writes}
}

type rememberingNodes struct {
	corev1client.NodeInterface
	writes *nodeWrites
}

func (n rememberingNodes) Update(ctx context.Context, node *corev1.Node, o metav1.UpdateOptions) (*corev1.Node, error) {
	out, err := n.NodeInterface.Update(ctx, node, o)
	n.writes.put(node.Name, out, err)
	return out, err
}

func (n rememberingNodes) UpdateStatus(ctx context.Context, node *corev1.Node, o metav1.UpdateOptions) (*corev1.Node, error) {
	out, err := n.NodeInterface.UpdateStatus(ctx, node, o)
	n.writes.put(node.Name, out, err)
	return out, err
}

func (n rememberingNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions,
	sub ...string) (*corev1.Node, error) {
	out, err := n.NodeInterface.Patch(ctx, name, pt, data, o, sub...)
	n.writes.put(name, out, err)
	return out, err
}

func (n rememberingNodes) Apply(ctx context.Context, node *applycorev1.NodeApplyConfiguration, o metav1.ApplyOptions) (*corev1.Node,
	error) {
	out, err := n.NodeInterface.Apply(ctx, node, o)
	if node.Name != nil {
		n.writes.put(*node.Name, out, err)
	}
	return out, err
}

func (n rememberingNodes) ApplyStatus(ctx context.Context, node *applycorev1.NodeApplyConfiguration, o metav1.ApplyOptions) (*corev1.Node,
	error) {
	out, err := n.NodeInterface.ApplyStatus(ctx, node, o)
	if node.Name != nil {
		n.writes.put(*node.Name, out, err)
	}
	return out, err
}

func (n rememberingNodes) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	err := n.NodeInterface.Delete(ctx, name, o)
	n.writes.put(name, nil, nil)
	return err
}
