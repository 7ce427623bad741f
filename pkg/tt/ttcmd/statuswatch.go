package ttcmd

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/ui"
)

// watchRedraw is how often --watch redraws what changed: events in
// between are coalesced per node.
const watchRedraw = 250 * time.Millisecond

// watchTable is --watch for the table: one list of the nodes, the helper
// pods and the Lease to start, then their watches; a change rewrites the
// changed node's row alone (ui.LiveTable), so a 5,000-node fleet costs what
// changed, not a re-list per event.
func (o *statusOptions) watchTable(ctx context.Context, cs kubernetes.Interface) error {
	selector, err := o.selection.LabelSelector()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range o.selection.Nodes {
		want[n] = true
	}
	nodeF := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }))
	podF := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = kube.LabelHelper }))
	leaseF := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("kube-system"),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", tt.LockName).String()
		}))
	nodes, pods, leases := nodeF.Core().V1().Nodes().Informer(), podF.Core().V1().Pods().Informer(),
		leaseF.Coordination().V1().Leases().Informer()
	if err := pods.AddIndexers(cache.Indexers{"node": func(o any) ([]string, error) {
		return []string{o.(*corev1.Pod).Spec.NodeName}, nil
	}}); err != nil {
		return err
	}
	var mu sync.Mutex
	dirty := map[string]bool{}
	footerDirty := false
	mark := func(name string) {
		if len(want) == 0 || want[name] {
			mu.Lock()
			dirty[name] = true
			mu.Unlock()
		}
	}
	onNode := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if n, ok := obj.(*corev1.Node); ok {
			mark(n.Name)
		}
	}
	onPod := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			mark(p.Spec.NodeName)
		}
	}
	onLease := func(any) { mu.Lock(); footerDirty = true; mu.Unlock() }
	handlers := func(f func(any)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, n any) { f(n) }, DeleteFunc: f}
	}
	for _, h := range []struct {
		i cache.SharedIndexInformer
		f func(any)
	}{{nodes, onNode}, {pods, onPod}, {leases, onLease}} {
		if _, err := h.i.AddEventHandler(handlers(h.f)); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, f := range []informers.SharedInformerFactory{nodeF, podF, leaseF} {
		f.Start(ctx.Done())
	}
	for _, f := range []informers.SharedInformerFactory{nodeF, podF, leaseF} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return cli.WithExitCode(cli.ExitFailed, fmt.Errorf("could not read %v to watch", typ))
			}
		}
	}
	helpersOf := func(node string) []corev1.Pod {
		objs, _ := pods.GetIndexer().ByIndex("node", node)
		out := make([]corev1.Pod, 0, len(objs))
		for _, o := range objs {
			out = append(out, *o.(*corev1.Pod))
		}
		return out
	}
	rowOf := func(name string) []string {
		obj, ok, _ := nodes.GetStore().GetByKey(name)
		if !ok {
			return nil
		}
		return o.cells(tt.StatusRow(ctx, cs, obj.(*corev1.Node), helpersOf(name)))
	}
	footer := func() []string {
		var note string
		if objs := leases.GetStore().List(); len(objs) > 0 {
			note = cli.RunNoteOf(objs[0].(*coordv1.Lease), "tt")
		}
		if note == "" {
			return nil
		}
		return strings.Split(note, "\n")
	}
	table := ui.NewLiveTable(o.g.IOStreams.Out, o.headers())
	mu.Lock()
	keys := nodes.GetStore().ListKeys()
	dirty, footerDirty = map[string]bool{}, false
	mu.Unlock()
	sort.Strings(keys)
	rows := map[string][]string{}
	var shown []string
	for _, k := range keys {
		if len(want) == 0 || want[k] {
			rows[k], shown = rowOf(k), append(shown, k)
		}
	}
	table.Draw(shown, rows, footer())
	tick := time.NewTicker(watchRedraw)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		mu.Lock()
		changed, fd := dirty, footerDirty
		dirty, footerDirty = map[string]bool{}, false
		mu.Unlock()
		names := make([]string, 0, len(changed))
		for n := range changed {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			table.Update(n, rowOf(n))
		}
		if fd {
			table.SetFooter(footer())
		}
	}
}
