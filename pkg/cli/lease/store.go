package lease

import (
	"context"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Store is where a lock reads and writes its one Lease: the API server
// (KubeStore), or memory in tests that drive the lock on a fake clock.
// Errors are the API server's (NotFound, Conflict, AlreadyExists).
type Store interface {
	// Key names the Lease.
	Key() (namespace, name string)
	Get(ctx context.Context) (*coordv1.Lease, error)
	Create(ctx context.Context, l *coordv1.Lease) (*coordv1.Lease, error)
	// Update writes l if the Lease is still at l's resourceVersion.
	Update(ctx context.Context, l *coordv1.Lease) (*coordv1.Lease, error)
	// WaitChange waits up to d for the Lease to change from cur (renewed,
	// released, taken or deleted); it may return sooner. The caller reads
	// the Lease again to know what happened: correctness never rests on
	// the wait, only on the versions read and the local clock.
	WaitChange(ctx context.Context, cur *coordv1.Lease, d time.Duration) error
}

// KubeStore is the Lease ns/name on the API server cs talks to.
func KubeStore(cs kubernetes.Interface, ns, name string) Store {
	return kubeStore{leases: cs.CoordinationV1().Leases(ns), ns: ns, name: name}
}

type kubeStore struct {
	leases   coordclient.LeaseInterface
	ns, name string
}

func (s kubeStore) Key() (string, string) { return s.ns, s.name }

func (s kubeStore) Get(ctx context.Context) (*coordv1.Lease, error) {
	return s.leases.Get(ctx, s.name, metav1.GetOptions{})
}

func (s kubeStore) Create(ctx context.Context, l *coordv1.Lease) (*coordv1.Lease, error) {
	return s.leases.Create(ctx, l, metav1.CreateOptions{})
}

func (s kubeStore) Update(ctx context.Context, l *coordv1.Lease) (*coordv1.Lease, error) {
	return s.leases.Update(ctx, l, metav1.UpdateOptions{})
}

// WaitChange watches the Lease from cur's resourceVersion. A watch that
// ends early without a change (closed, or refused: a role may lack watch on
// leases) is not taken for one: the rest of d is waited out, and the
// caller's next read compares versions.
func (s kubeStore) WaitChange(ctx context.Context, cur *coordv1.Lease, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", s.name).String()
	lw := &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return s.leases.Watch(ctx, o)
		},
	}
	_, err := watchtools.Until(wctx, cur.ResourceVersion, lw, func(e watch.Event) (bool, error) {
		if e.Type == watch.Error {
			return false, apierrors.FromObject(e.Object)
		}
		return e.Type == watch.Modified || e.Type == watch.Deleted, nil
	})
	if err != nil && wctx.Err() == nil {
		<-wctx.Done()
	}
	return context.Cause(ctx)
}
