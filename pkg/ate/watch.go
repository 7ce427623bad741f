package ate

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/rollbook/rollbook/pkg/kube"
)

// watchPodsOnNode watches every pod on node (one request: a list and a
// watch) until done holds for the pods it shows, and returns those pods.
// They are the watch's store when done held: as fresh as a list made then,
// so the step that waited needs no list of its own afterwards.
func watchPodsOnNode(ctx context.Context, cs kubernetes.Interface, node string, done func([]corev1.Pod) bool) ([]corev1.Pod, error) {
	var store cache.Store
	var last []corev1.Pod
	check := func() bool {
		items := store.List()
		pods := make([]corev1.Pod, 0, len(items))
		for _, o := range items {
			pods = append(pods, *o.(*corev1.Pod))
		}
		sort.Slice(pods, func(i, j int) bool {
			return pods[i].Namespace < pods[j].Namespace || pods[i].Namespace == pods[j].Namespace && pods[i].Name < pods[j].Name
		})
		if done(pods) {
			last = pods
			return true
		}
		return false
	}
	_, err := watchtools.UntilWithSync(ctx, kube.PodsOnNodeLW(cs, metav1.NamespaceAll, node), &corev1.Pod{},
		func(s cache.Store) (bool, error) {
			store = s
			return check(), nil
		}, func(watch.Event) (bool, error) { return check(), nil })
	if err != nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return last, err
}
