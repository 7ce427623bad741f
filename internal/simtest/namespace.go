package simtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// NewNamespace creates a namespace for one test, waits until pods can be
// created in it (the ServiceAccount admission plugin rejects pods until the
// controller has made the "default" ServiceAccount) and deletes it afterwards.
func (c *Cluster) NewNamespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.TrimRight(name, "-") + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	if err := c.waitDefaultServiceAccount(ctx, ns.Name); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// waitDefaultServiceAccount waits until the controller has made namespace
// ns's "default" ServiceAccount, which pods there need.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, ns string) error {
	// pkg/kube's FieldSelectedLW would do, but pkg/kube's own tests use this package.
	sas := c.Client.CoreV1().ServiceAccounts(ns)
	sel := fields.OneTermEqualSelector("metadata.name", "default").String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return sas.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return sas.Watch(ctx, o)
		},
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.ServiceAccount{}, nil, func(e watch.Event) (bool, error) {
		return e.Type == watch.Added || e.Type == watch.Modified, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s: default ServiceAccount: %w", ns, err)
	}
	return nil
}
