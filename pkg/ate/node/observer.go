package node

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
)

// nodePart is a part of nodeFacts, as the observer reads them.
type nodePart uint8

const (
	partNode nodePart = 1 << iota
	partPods
	partInv
	allParts = partNode | partPods | partInv
)

// nodeObserver is the one place a node runbook's facts come from: the
// engine's look at the node (before the first step and after each step
// acts, look) and the looks a step makes while it acts in rounds (read).
// It holds the run's latest facts (last) and which of their parts are
// current (fresh); each part has one source of truth:
//
//   - the node: the response of the run's own latest write to it, when
//     that is newer than the node last seen (kube.NodeWrites: the
//     runbook's patches, the flip's cordon and the engine's step clocks
//     all go through cs); else last's node when it is fresh or not asked
//     for; else a GET.
//   - the pods on it and the inventory: last's when fresh or not asked
//     for; else a read. From the wait for the new atelet to the end of
//     the verify the steps read the pods from the live watch (pods), and
//     hand what it shows over with saw.
//
// A part is fresh when a step hands facts over (saw) that it read after
// its last change, or that its change cannot show in (the mark step's
// annotations: the pods and the inventory), and when the run has just
// listed the node (seed). Fresh parts serve the next look only; after it
// nothing is fresh. A patch's resourceVersion base is not an observation:
// newest.
type nodeObserver struct {
	cs  kubernetes.Interface // remembers node writes
	api API
	cfg *Config

	mu    sync.Mutex
	last  nodeFacts
	fresh nodePart
	// live watches the node's pods from the wait for the new atelet to the
	// end of the verify: one request for the three waits (pods).
	live     *podWatch
	liveNode string
	stopLive context.CancelFunc
}

func newNodeObserver(cs kubernetes.Interface, api API, cfg *Config) *nodeObserver {
	return &nodeObserver{cs: kube.RememberNodeWrites(cs), api: api, cfg: cfg}
}

// look is the engine's observation of the node: every part, fresh ones
// taken as they are.
func (o *nodeObserver) look(ctx context.Context, name string) (nodeFacts, error) {
	return o.read(ctx, name, allParts)
}

// read returns the node's facts with the parts in want current: fresh, or
// read now. The other parts are last's (the node brought up to the run's
// latest write to it).
func (o *nodeObserver) read(ctx context.Context, name string, want nodePart) (nodeFacts, error) {
	o.mu.Lock()
	f, fresh, cfg := o.last, o.fresh, o.cfg
	o.fresh = 0
	o.mu.Unlock()
	if f.node == nil || f.node.Name != name {
		f, fresh, want = nodeFacts{}, 0, allParts
	}
	f.cfg = cfg
	stale := want &^ fresh
	if n := o.written(name); n != nil {
		f.node = n
	} else if stale&partNode != 0 {
		n, err := o.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return f, err
		}
		f.node = n
	}
	o.observed(f.node)
	var err error
	if stale&partPods != 0 {
		if f.pods, err = kube.PodsOnNode(ctx, o.cs, name); err != nil {
			return f, err
		}
	}
	if stale&partInv != 0 {
		if f.inv, err = o.inventory(ctx, name, f.pods); err != nil {
			return f, err
		}
	}
	o.mu.Lock()
	o.last = f
	o.mu.Unlock()
	return f, nil
}

// inventory reads the substrate's workers and actors, the workers that
// cannot serve marked (Config.MarkDown) with pods, the node's as just read.
func (o *nodeObserver) inventory(ctx context.Context, node string, pods []corev1.Pod) (*ateapi.Inventory, error) {
	inv, err := o.api.Inventory(ctx)
	o.mu.Lock()
	mark := o.cfg.MarkDown
	o.mu.Unlock()
	if err == nil && mark != nil {
		mark(inv, node, pods)
	}
	return inv, err
}

// saw hands f over to the next look, every part fresh: the step read it
// after its last change, or its change cannot show in the parts it did not
// read again. The node is brought up to the run's latest write to it (a
// step clock written meanwhile, the step's own patch).
func (o *nodeObserver) saw(f nodeFacts) {
	if n := o.written(f.node.Name); n != nil {
		f.node = n
	}
	o.observed(f.node)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last, o.fresh = f, allParts
}

// begin sets the observer to the next node of a run: the way it moves
// (cfg) and the node as the run just listed it (seed; nil if it was not
// listed in full). Nothing the observer held of the node before serves it.
func (o *nodeObserver) begin(cfg *Config, n *corev1.Node) {
	o.close()
	o.mu.Lock()
	o.cfg, o.last, o.fresh = cfg, nodeFacts{}, 0
	o.mu.Unlock()
	o.seed(n)
}

// seed hands the node as the run just listed it to the first look, which
// reads the pods and the inventory.
func (o *nodeObserver) seed(n *corev1.Node) {
	if n == nil {
		return
	}
	o.observed(n)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last, o.fresh = nodeFacts{cfg: o.cfg, node: n}, partNode
}

// written is the node as the run's latest write returned it, if that is
// newer than the node last seen; nil otherwise.
func (o *nodeObserver) written(name string) *corev1.Node {
	if w := kube.NodeWritesOf(o.cs); w != nil {
		return w.Take(name)
	}
	return nil
}

func (o *nodeObserver) observed(n *corev1.Node) {
	if w := kube.NodeWritesOf(o.cs); w != nil {
		w.Observed(n)
	}
}

// newest is n or the node as the run's last write to it returned it: the
// base of a patch with a resourceVersion precondition.
func (o *nodeObserver) newest(n *corev1.Node) *corev1.Node {
	if w := kube.NodeWritesOf(o.cs); w != nil {
		return w.Newest(n)
	}
	return n
}

// pods returns the live watch of the node's pods, started on first use
// (or again if it stopped); it runs until close.
func (o *nodeObserver) pods(ctx context.Context, node string) *podWatch {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live == nil || o.liveNode != node || o.live.ended() {
		if o.stopLive != nil {
			o.stopLive()
		}
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		o.live, o.liveNode, o.stopLive = startPodWatch(wctx, o.cs, node), node, cancel
	}
	return o.live
}

// close stops the live watch, if any.
func (o *nodeObserver) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopLive != nil {
		o.stopLive()
		o.live, o.stopLive = nil, nil
	}
}
