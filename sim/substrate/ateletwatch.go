package substrate

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/sim/cluster"
)

// ateletHold keeps a deleted atelet pod Terminating for handoff after its
// deletion (it drains, within its 330s grace period): it holds the node's
// host ports 8085 and 9090 meanwhile, so the scheduler leaves the node's
// new atelet pod Pending until it is gone.
func ateletHold(handoff time.Duration) cluster.ExitHold {
	return func(p *corev1.Pod) (time.Duration, string) {
		if handoff <= 0 || p.Namespace != Namespace || p.Labels[AppLabel] != AteletApp {
			return 0, ""
		}
		return time.Until(cluster.DeletionRequested(p).Add(handoff)), "atelet " + p.Name + " drains before it exits"
	}
}

// watchAtelets tells the fake server which atelet versions are Ready on
// each node: a suspend checkpoints through the atelet of the worker's node,
// and only the atelet of the worker's own version serves it (the old one
// leaves when the node's label flips; a Terminating pod serves nothing).
func watchAtelets(ctx context.Context, cs kubernetes.Interface, srv *fakesubstrate.Server) error {
	f := kubeinformers.NewSharedInformerFactoryWithOptions(cs, 0, kubeinformers.WithNamespace(Namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = AppLabel + "=" + AteletApp }))
	inf := f.Core().V1().Pods().Informer()
	report := func(node string) {
		if node == "" {
			return
		}
		var versions []string
		for _, o := range inf.GetStore().List() {
			p, ok := o.(*corev1.Pod)
			if ok && p.Spec.NodeName == node && p.DeletionTimestamp == nil && podReady(p) &&
				!slices.Contains(versions, p.Labels[VersionLabel]) {
				versions = append(versions, p.Labels[VersionLabel])
			}
		}
		srv.SetAtelets(node, versions)
	}
	nodeOf := func(o any) string {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if p, ok := o.(*corev1.Pod); ok {
			return p.Spec.NodeName
		}
		return ""
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { report(nodeOf(o)) },
		UpdateFunc: func(_, o any) { report(nodeOf(o)) },
		DeleteFunc: func(o any) { report(nodeOf(o)) },
	})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("atelet pod cache did not sync: %w", ctx.Err())
	}
	return nil
}
