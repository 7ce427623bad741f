package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// nodeWatch ties paused actors to their node's atelet: a PAUSED actor's
// local snapshot lives in the atelet of its node, so when the node's
// version label changes (the old atelet leaves, another starts) every actor
// still paused there loses its state.
type nodeWatch struct {
	factory kubeinformers.SharedInformerFactory
	srv     *fakesubstrate.Server
	changed *changes
	logf    func(string, ...any)
	dir     string // where FlipsFile goes ("" = not recorded)
}

// FlipsFile (in the sim's directory) gets one JSON line {"node","from","to"}
// per change of a node's version label the substrate saw, so a test counts
// flips from the substrate's side rather than from what a client said.
const FlipsFile = "ate-flips.log"

func newNodeWatch(cs kubernetes.Interface, srv *fakesubstrate.Server, changed *changes, logf func(string, ...any)) *nodeWatch {
	return &nodeWatch{factory: kubeinformers.NewSharedInformerFactory(cs, 0), srv: srv, changed: changed, logf: logf}
}

func (n *nodeWatch) start(ctx context.Context) error {
	inf := n.factory.Core().V1().Nodes().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, c any) {
		before, ok1 := o.(*corev1.Node)
		after, ok2 := c.(*corev1.Node)
		if ok1 && ok2 && before.Labels[VersionLabel] != after.Labels[VersionLabel] {
			n.flipped(after.Name, before.Labels[VersionLabel], after.Labels[VersionLabel])
		}
	}})
	n.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("node cache did not sync: %w", ctx.Err())
	}
	return nil
}

func (n *nodeWatch) flipped(node, from, to string) {
	n.record(node, from, to)
	lost := n.srv.LoseLocalSnapshots(node)
	if len(lost) > 0 {
		n.logf("substrate: node %s flipped %s → %s with %d paused actor(s) there: their local snapshots are "+
			"gone", node, from, to, len(lost))
		n.changed.fire()
	}
}

func (n *nodeWatch) record(node, from, to string) {
	if n.dir == "" {
		return
	}
	b, _ := json.Marshal(map[string]string{"node": node, "from": from, "to": to})
	f, err := os.OpenFile(filepath.Join(n.dir, FlipsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		n.logf("substrate: cannot record the flip of %s: %v", node, err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}
