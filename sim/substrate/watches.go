package substrate

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	kubeinformers "k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// watches are the watches the pool controller and worker syncer share:
// WorkerPools everywhere, and Deployments and pods carrying the pool label.
type watches struct {
	dynFactory  dynamicinformer.DynamicSharedInformerFactory
	kubeFactory kubeinformers.SharedInformerFactory
	pools       kubeinformers.GenericInformer
	deps        appsinformers.DeploymentInformer
	pods        coreinformers.PodInformer
}

func newWatches(cs kubernetes.Interface, dyn dynamic.Interface) *watches {
	df := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	kf := kubeinformers.NewSharedInformerFactoryWithOptions(cs, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = PoolLabel }))
	return &watches{
		dynFactory: df, kubeFactory: kf,
		pools: df.ForResource(GVRWorkerPool),
		deps:  kf.Apps().V1().Deployments(),
		pods:  kf.Core().V1().Pods(),
	}
}

// start runs the informers and waits for their caches.
func (i *watches) start(ctx context.Context) error {
	i.dynFactory.Start(ctx.Done())
	i.kubeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), i.pools.Informer().HasSynced, i.deps.Informer().HasSynced, i.pods.Informer().HasSynced) {
		return fmt.Errorf("informer caches did not sync: %w", ctx.Err())
	}
	return nil
}
