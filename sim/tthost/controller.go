package tthost

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func splitKey(key string) (ns, name string, err error) {
	ns, name, err = cache.SplitMetaNamespaceKey(key)
	if err == nil && name == "" {
		err = fmt.Errorf("bad key %q", key)
	}
	return ns, name, err
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
