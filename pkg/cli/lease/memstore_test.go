package lease

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// memStore is one Lease in memory with the API server's write rules
// (resourceVersion preconditions, AlreadyExists, NotFound), for tests that
// run the lock on synctest's fake clock. Create it inside the bubble.
type memStore struct {
	mu      sync.Mutex
	lease   *coordv1.Lease // nil: none
	version int
	changed chan struct{} // closed and replaced at every write
	writes  int
}

func newMemStore() *memStore { return &memStore{changed: make(chan struct{})} }

var leasesResource = coordv1.Resource("leases")

func (s *memStore) Key() (string, string) { return "ns", "rollbook-test" }

func (s *memStore) Get(context.Context) (*coordv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return nil, apierrors.NewNotFound(leasesResource, "rollbook-test")
	}
	return s.lease.DeepCopy(), nil
}

func (s *memStore) Create(_ context.Context, l *coordv1.Lease) (*coordv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != nil {
		return nil, apierrors.NewAlreadyExists(leasesResource, l.Name)
	}
	return s.write(l), nil
}

func (s *memStore) Update(_ context.Context, l *coordv1.Lease) (*coordv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return nil, apierrors.NewNotFound(leasesResource, l.Name)
	}
	if l.ResourceVersion != s.lease.ResourceVersion {
		return nil, apierrors.NewConflict(leasesResource, l.Name, errors.New("the object has been modified"))
	}
	return s.write(l), nil
}

func (s *memStore) write(l *coordv1.Lease) *coordv1.Lease {
	s.version++
	s.writes++
	s.lease = l.DeepCopy()
	s.lease.ResourceVersion = strconv.Itoa(s.version)
	close(s.changed)
	s.changed = make(chan struct{})
	return s.lease.DeepCopy()
}

func (s *memStore) WaitChange(ctx context.Context, cur *coordv1.Lease, d time.Duration) error {
	s.mu.Lock()
	moved := s.lease == nil || s.lease.ResourceVersion != cur.ResourceVersion
	changed := s.changed
	s.mu.Unlock()
	if moved {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// edit changes the stored Lease as another writer would (a pause, a
// holder that stopped renewing).
func (s *memStore) edit(change func(*coordv1.Lease)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lease.DeepCopy()
	change(l)
	s.write(l)
}

// remove deletes the stored Lease as another client would.
func (s *memStore) remove() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lease = nil
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
}

// cutStore is one client's view of a store, which a test can cut off:
// then every request fails with fail, or, when fail is nil, hangs until its
// deadline, as towards an unreachable server.
type cutStore struct {
	Store
	mu   sync.Mutex
	cut  bool
	fail error
}

func (c *cutStore) cutOff(fail error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut, c.fail = true, fail
}

func (c *cutStore) hang(ctx context.Context) error {
	c.mu.Lock()
	cut, fail := c.cut, c.fail
	c.mu.Unlock()
	switch {
	case !cut:
		return nil
	case fail != nil:
		return fail
	}
	<-ctx.Done()
	return ctx.Err()
}

func (c *cutStore) Get(ctx context.Context) (*coordv1.Lease, error) {
	if err := c.hang(ctx); err != nil {
		return nil, err
	}
	return c.Store.Get(ctx)
}

func (c *cutStore) Update(ctx context.Context, l *coordv1.Lease) (*coordv1.Lease, error) {
	if err := c.hang(ctx); err != nil {
		return nil, err
	}
	return c.Store.Update(ctx, l)
}
