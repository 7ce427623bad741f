package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	clk      clocks

	mu    sync.Mutex // guards lease and serialises writes
	lease *coordv1.Lease
	// okMu guards lastOK: when the last write that proved the Lease ours
	// was sent (the Lease changed no later than that).
	okMu   sync.Mutex
	lastOK stamp
	// checkMu makes concurrent Checks of a stale lock renew once.
	checkMu sync.Mutex
	// published are annotations written with the next renewal (Publish).
	pubMu     sync.Mutex
	published map[string]string
	errMu     sync.Mutex
	err       error
	lost      chan struct{}
	lostOnce  sync.Once
	recheck   chan struct{} // asks the renewer for a renewal now
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once // closes stop
}

// newLock starts renewing held, which a write sent at sent made ours.
func newLock(s Store, h Holder, d time.Duration, held *coordv1.Lease, takeover string, sent stamp, clk clocks) *Lock {
	l := &Lock{store: s, holder: h, duration: d, takeover: takeover, lease: held, clk: clk, lastOK: sent,
		lost: make(chan struct{}), recheck: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.ns, l.name = s.Key()
	go l.renew()
	return l
}

// TakeoverNote says whom this lock was taken over from, or "".
func (l *Lock) TakeoverNote() string { return l.takeover }

// notHeldError: the Lease has another holder now, or none, or is gone.
type notHeldError struct {
	by      string
	deleted bool
}

func (e *notHeldError) Error() string {
	switch {
	case e.deleted:
		return "it was deleted"
	case e.by == "":
		return "it was released"
	}
	return "it is held by " + e.by + " now"
}

// awakePoll is how often the renewer compares the boot clock with the
// monotonic one: a machine that slept renews (and learns whether the Lease
// is still its own) within this much of waking, not at its next tick,
// which the monotonic clock put off by the whole sleep.
const awakePoll = time.Second

// renew keeps the lease fresh every duration/6, and at once after the
// machine slept (awakePoll) or when asked (a watch saw the Lease deleted).
// Losing it (someone took it over or deleted it, or no renewal succeeded
// for 2/3 of the lease duration) closes Lost: the holder fences itself
// before any other machine, which waits the whole duration and a margin
// from the last renewal it saw, may take over.
func (l *Lock) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.duration / 6)
	defer tick.Stop()
	awake := time.NewTicker(awakePoll)
	defer awake.Stop()
	polled := l.clk.now()
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-tick.C:
		case <-l.recheck:
		case <-awake.C:
			now := l.clk.now()
			gap := slept(polled, now)
			polled = now
			if gap < awakePoll/2 {
				continue
			}
		}
		if l.renewOnce(context.Background()) != nil && l.isLost() {
			return
		}
	}
}

// renewOnce writes one renewal. The fencing clock runs from when the last
// good renewal was sent, not when its answer came, and counts time the
// machine slept: a holder that cannot prove the Lease its own within 2/3 of
// the duration of that loses it. It returns nil when the write proved the
// Lease ours, else the error (Err once the lock is lost).
func (l *Lock) renewOnce(ctx context.Context) error {
	last := l.confirmed()
	sent := l.clk.now()
	fence := 2 * l.duration / 3
	// No renewal may outlast the fence: a request that hangs must not keep
	// a holder that cannot renew acting past it. One woken past the fence
	// (it slept) still gets one attempt: a write conditional on the
	// version it last wrote proves nobody took the Lease meanwhile.
	wait := l.duration / 6
	if left := fence - l.clk.since(last); left > 0 {
		wait = min(wait, left)
	}
	// Paced: a renewal is a cost per second of the run, not per node.
	rctx, cancel := context.WithTimeout(paced.Mark(ctx), wait)
	defer cancel()
	pub := l.takePublished()
	err := l.modify(rctx, func(cur *coordv1.Lease) {
		now := metav1.NewMicroTime(kube.ServerNow())
		cur.Spec.RenewTime = &now
		for k, v := range pub {
			metav1.SetMetaDataAnnotation(&cur.ObjectMeta, k, v)
		}
	})
	if err != nil {
		l.keepPublished(pub)
	}
	var notHeld *notHeldError
	switch {
	case err == nil:
		l.confirm(sent)
		return nil
	case errors.As(err, &notHeld) || kube.IsWriteConflict(err) || l.clk.since(last) >= fence:
		l.lose(fmt.Errorf("lost lease %s/%s: %w", l.ns, l.name, err))
		return l.Err()
	}
	return err
}

// confirmed is when the Lease was last proved ours.
func (l *Lock) confirmed() stamp {
	l.okMu.Lock()
	defer l.okMu.Unlock()
	return l.lastOK
}

func (l *Lock) confirm(sent stamp) {
	l.okMu.Lock()
	defer l.okMu.Unlock()
	if !sent.mono.Before(l.lastOK.mono) {
		l.lastOK = sent
	}
}

func (l *Lock) lose(err error) {
	l.lostOnce.Do(func() {
		l.errMu.Lock()
		l.err = err
		l.errMu.Unlock()
		close(l.lost)
	})
}

func (l *Lock) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// Check returns nil when this run may send a mutation now: the Lease was
// proved its own within the last third of its duration, counting any time
// the machine slept or the process was stopped, or a renewal made now
// proves it. Otherwise it returns why not: the lock is lost (Err), or a
// renewal could not be made. A run that woke from a suspend, or was
// resumed after SIGSTOP, past its Lease thus learns that another run took
// over before its next mutation, not at its next renewal.
func (l *Lock) Check(ctx context.Context) error {
	if l.isLost() {
		return l.Err()
	}
	if l.clk.since(l.confirmed()) < l.duration/3 {
		return nil
	}
	l.checkMu.Lock()
	defer l.checkMu.Unlock()
	if l.clk.since(l.confirmed()) < l.duration/3 { // another Check renewed
		return nil
	}
	if err := l.renewOnce(ctx); err != nil {
		if l.isLost() {
			return err
		}
		return fmt.Errorf("cannot confirm that this run still holds lease %s/%s (last confirmed %s ago): %w", l.ns, l.name,
			l.clk.since(l.confirmed()).Round(time.Second), err)
	}
	return nil
}

// Recheck asks for a renewal now, which proves the Lease still ours or
// loses it: a watch of the Lease saw it deleted or taken.
func (l *Lock) Recheck() {
	select {
	case l.recheck <- struct{}{}:
	default:
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
			if apierrors.IsNotFound(err) {
				return &notHeldError{deleted: true}
			}
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
		if apierrors.IsNotFound(err) {
			return &notHeldError{deleted: true}
		}
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
	l.errMu.Lock()
	defer l.errMu.Unlock()
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
