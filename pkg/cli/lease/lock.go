package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/paced"
)

// Lock is a held Lease, renewed in the background until Release.
type Lock struct {
	store    Store
	ns, name string
	holder   Holder
	duration time.Duration
	takeover string

	mu    sync.Mutex // guards lease and err, and serialises writes
	lease *coordv1.Lease
	err   error
	// published are annotations written with the next renewal (Publish).
	pubMu     sync.Mutex
	published map[string]string
	lost      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once // closes stop
}

// newLock starts renewing held, which a write sent at sent made ours.
func newLock(s Store, h Holder, d time.Duration, held *coordv1.Lease, takeover string, sent time.Time) *Lock {
	l := &Lock{store: s, holder: h, duration: d, takeover: takeover, lease: held,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	l.ns, l.name = s.Key()
	go l.renew(sent)
	return l
}

// TakeoverNote says whom this lock was taken over from, or "".
func (l *Lock) TakeoverNote() string { return l.takeover }

// notHeldError: the Lease has another holder now.
type notHeldError struct{ by string }

func (e *notHeldError) Error() string {
	if e.by == "" {
		return "it was released"
	}
	return "it is held by " + e.by + " now"
}

// renew keeps the lease fresh every duration/6. Losing it (someone took it
// over, or no renewal succeeded for 2/3 of the lease duration) closes Lost:
// the holder fences itself before any other machine, which waits the whole
// duration and a margin from the last renewal it saw, may take over. The
// fencing clock runs from when the last good renewal was sent, not when its
// answer came: the Lease changed no later than that.
func (l *Lock) renew(lastOK time.Time) {
	defer close(l.done)
	tick := time.NewTicker(l.duration / 6)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		sent := time.Now()
		// No renewal may outlast the fencing deadline: a request that hangs
		// must not keep a holder that cannot renew acting past it.
		fence := lastOK.Add(2 * l.duration / 3)
		// Paced: a renewal is a cost per second of the run, not per node.
		ctx, cancel := context.WithDeadline(paced.Mark(context.Background()), minTime(sent.Add(l.duration/6), fence))
		pub := l.takePublished()
		err := l.modify(ctx, func(cur *coordv1.Lease) {
			now := metav1.NewMicroTime(time.Now())
			cur.Spec.RenewTime = &now
			for k, v := range pub {
				metav1.SetMetaDataAnnotation(&cur.ObjectMeta, k, v)
			}
		})
		if err != nil {
			l.keepPublished(pub)
		}
		cancel()
		var notHeld *notHeldError
		taken := errors.As(err, &notHeld)
		switch {
		case err == nil:
			lastOK = sent
		case taken || kube.IsWriteConflict(err) || !time.Now().Before(fence):
			l.mu.Lock()
			l.err = fmt.Errorf("lost lease %s/%s: %w", l.ns, l.name, err)
			l.mu.Unlock()
			close(l.lost)
			return
		}
	}
}

// modify applies change to the held Lease and writes it, from the copy
// last written, reading it again after a conflict: someone else wrote it (a
// pause, say), and it is still ours as long as the holder is. It fails
// with *notHeldError once the Lease has another holder (or none).
func (l *Lock) modify(ctx context.Context, change func(*coordv1.Lease)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, stale := l.lease, false
	return kube.RetryOnConflict(ctx, func() error {
		if stale {
			fresh, err := l.store.Get(ctx)
			if err != nil {
				return err
			}
			cur = fresh
		}
		stale = true // a second attempt follows a conflict
		if by := heldBy(cur); by != l.holder.Identity() {
			return &notHeldError{by: by}
		}
		next := cur.DeepCopy()
		change(next)
		updated, err := l.store.Update(ctx, next)
		if err != nil {
			return err
		}
		l.lease = updated
		return nil
	})
}

// Publish sets an annotation of the Lease with its next renewal: no
// request of its own (a run's progress, rewritten per node, rides on the
// renewals it makes anyway). A later Publish of the same key wins.
func (l *Lock) Publish(key, value string) {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	if l.published == nil {
		l.published = map[string]string{}
	}
	l.published[key] = value
}

func (l *Lock) takePublished() map[string]string {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	p := l.published
	l.published = nil
	return p
}

// keepPublished puts back what a failed renewal did not write, unless
// published again since.
func (l *Lock) keepPublished(p map[string]string) {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	for k, v := range p {
		if _, newer := l.published[k]; !newer {
			if l.published == nil {
				l.published = map[string]string{}
			}
			l.published[k] = v
		}
	}
}

// Lost is closed when the lock was lost; the run must stop acting.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err says why the lock was lost.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release stops renewing and frees the lease for the next run. Releasing
// again does nothing more.
func (l *Lock) Release(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	select {
	case <-l.lost:
		return nil
	default:
	}
	pub := l.takePublished() // the run's last progress stays readable after it
	err := l.modify(ctx, func(cur *coordv1.Lease) {
		cur.Spec.HolderIdentity = nil
		cur.Spec.RenewTime = nil
		for k, v := range pub {
			metav1.SetMetaDataAnnotation(&cur.ObjectMeta, k, v)
		}
	})
	if notHeld := (*notHeldError)(nil); errors.As(err, &notHeld) {
		return nil // someone else has it now
	}
	return err
}

// WithLock returns a context cancelled (with the reason) when the lock is lost.
func (l *Lock) WithLock(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-l.lost:
			cancel(l.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Annotation reads an annotation of the held Lease. Runs keep small,
// roll-wide records there (e.g. when a forced re-flash campaign started).
func (l *Lock) Annotation(key string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.lease.Annotations[key]
	return v, ok
}

// SetAnnotation writes (nil: removes) an annotation of the held Lease. It
// goes through the lock so renewals never see a conflict of our own making.
func (l *Lock) SetAnnotation(ctx context.Context, key string, value *string) error {
	err := l.modify(ctx, func(cur *coordv1.Lease) {
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		if value == nil {
			delete(cur.Annotations, key)
		} else {
			cur.Annotations[key] = *value
		}
	})
	if err != nil {
		return fmt.Errorf("annotate lease %s/%s: %w", l.ns, l.name, err)
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
