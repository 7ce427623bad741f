// Package lease is the lock that keeps two runs of a runbook from acting at
// once: a coordination.k8s.io Lease, renewed while the run acts, that a new
// run takes over without ceremony once its holder is provably gone.
package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

// Lease annotations describing the holder, for the "who has it" message.
const (
	annHolderUser    = "rollbook.dev/holder-user"
	annHolderHost    = "rollbook.dev/holder-host"
	annHolderPID     = "rollbook.dev/holder-pid"
	annHolderRun     = "rollbook.dev/holder-run"
	annHolderCommand = "rollbook.dev/holder-command"
	annHolderBoot    = "rollbook.dev/holder-boot-id"
	annHolderStart   = "rollbook.dev/holder-process-start"
	// AnnTakeover records the last takeover: who took the lease from whom, when and why.
	AnnTakeover = "rollbook.dev/taken-over"
)

// Holder identifies a run.
type Holder struct {
	User    string
	Host    string
	PID     int
	RunID   string
	Command string
	// BootID and Start identify the holder's process beyond its pid, so a
	// pid reused after the holder died is not mistaken for it.
	BootID string
	Start  string
}

// Identity is the holder "user@host/pid/run".
func (h Holder) Identity() string {
	return fmt.Sprintf("%s@%s/%d/%s", h.User, h.Host, h.PID, h.RunID)
}

// CurrentHolder describes this process, asking the API server who we are.
func CurrentHolder(ctx context.Context, cs kubernetes.Interface, runID string) Holder {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return Holder{User: WhoAmI(ctx, cs), Host: host, PID: pid, RunID: runID, Command: strings.Join(RedactArgs(os.Args), " "),
		BootID: bootID(), Start: processStart(pid)}
}

// WhoAmI returns the authenticated user name (SelfSubjectReview), or
// "unknown" when the server does not say.
func WhoAmI(ctx context.Context, cs kubernetes.Interface) string {
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || r.Status.UserInfo.Username == "" {
		return "unknown"
	}
	return r.Status.UserInfo.Username
}

// LockedError says who holds the lock.
type LockedError struct {
	Lease      string
	Holder     Holder
	Since      time.Time
	RenewedAgo time.Duration // by the API server's clock; informational only
}

func (e *LockedError) who() string {
	return fmt.Sprintf("%s on %s (pid %d, run %s)", e.Holder.User, e.Holder.Host, e.Holder.PID, e.Holder.RunID)
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("another run holds lease %s: %s since %s, and it is alive (it renewed the lease). "+
		"Wait for it to finish or stop it; if it is stuck, --steal-lock takes over and makes it stop acting",
		e.Lease, e.who(), e.Since.Format(time.RFC3339))
}

// ExitCode makes the CLI exit 4.
func (e *LockedError) ExitCode() int { return 4 }

// Lock is a held Lease, renewed in the background until Release.
type Lock struct {
	cs       kubernetes.Interface
	ns, name string
	holder   Holder
	duration time.Duration

	mu    sync.Mutex
	lease *coordv1.Lease
	lost  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	err   error

	takeover string
}

// LockOptions tune Acquire.
type LockOptions struct {
	// Duration after the last renewal at which a holder counts as dead.
	Duration time.Duration
	// Margin is added to the lease's duration (its holder's, when the
	// Lease says) before a lease this machine has seen unchanged counts as
	// abandoned (default Duration/6, scaled to the holder's duration).
	Margin time.Duration
	// Steal takes over even from a holder that still renews the lease (a
	// live but stuck run); that run fences itself at its next renewal.
	Steal bool
	// Notify is told what Acquire waits for and whom it takes over from.
	Notify func(msg string)
	// Local describes this machine; tests replace it to act as another host.
	Local *Local
}

// Acquire takes the Lease ns/name for holder. A holder that is provably
// gone (same host, its process no longer exists) is taken over at once; any
// other holder is watched, and taken over only once this machine has seen
// the lease unchanged for longer than its duration plus a margin — judged on
// the local clock, so clock skew never makes a live lock look dead. A live
// holder makes Acquire fail with *LockedError.
func Acquire(ctx context.Context, cs kubernetes.Interface, ns, name string, holder Holder, o LockOptions) (*Lock, error) {
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Margin == 0 {
		o.Margin = o.Duration / 6
	}
	if o.Notify == nil {
		o.Notify = func(string) {}
	}
	if o.Local == nil {
		o.Local = ThisMachine()
	}
	l := &Lock{cs: cs, ns: ns, name: name, holder: holder, duration: o.Duration,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	leases := cs.CoordinationV1().Leases(ns)
	for attempt := 0; attempt < 8; attempt++ {
		now := metav1.NewMicroTime(time.Now())
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			created, err := leases.Create(ctx, l.leaseFor(nil, now, ""), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("create lease %s/%s: %w", ns, name, err)
			}
			return l.start(created), nil
		}
		if err != nil {
			return nil, fmt.Errorf("read lease %s/%s: %w", ns, name, err)
		}
		takeover := ""
		if held := heldBy(cur); held != "" && held != holder.Identity() {
			prev := lockedError(cur)
			switch {
			case o.Steal:
				takeover = "--steal-lock"
				o.Notify(fmt.Sprintf("--steal-lock: taking lease %s from %s; if that run is still alive it stops acting "+
					"at its next renewal (within %s)", prev.Lease, prev.who(), o.Duration/3))
			case o.Local.Gone(prev.Holder):
				takeover = fmt.Sprintf("its process (pid %d on %s) no longer exists", prev.Holder.PID, prev.Holder.Host)
			case o.Local.Alive(prev.Holder):
				return nil, prev
			default:
				// The holder fences itself by its own lease duration, so that
				// is the one to wait out (plus the margin), not ours.
				wait := o.Duration + o.Margin
				if d := cur.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
					theirs := time.Duration(*d) * time.Second
					margin := time.Duration(float64(o.Margin) * float64(theirs) / float64(o.Duration))
					wait = theirs + max(margin, time.Second)
				}
				o.Notify(fmt.Sprintf("lease %s is held by %s; watching it for up to %s: a live run renews it, "+
					"a dead one is taken over", prev.Lease, prev.who(), wait.Round(time.Second)))
				renewed, err := watchForRenewal(ctx, cs, cur, wait)
				if err != nil {
					return nil, err
				}
				if renewed {
					if fresh, err := leases.Get(ctx, name, metav1.GetOptions{}); err == nil {
						if heldBy(fresh) == "" {
							continue // released meanwhile: take it
						}
						return nil, lockedError(fresh)
					}
					return nil, prev
				}
				takeover = fmt.Sprintf("not renewed for %s as seen from this machine", wait.Round(time.Second))
			}
			takeover = fmt.Sprintf("%s took over from %s at %s: %s", holder.Identity(), held,
				now.UTC().Format(time.RFC3339), takeover)
		}
		updated, err := leases.Update(ctx, l.leaseFor(cur, now, takeover), metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("take lease %s/%s: %w", ns, name, err)
		}
		if takeover != "" {
			l.takeover = takeover
			o.Notify("lock: " + takeover)
		}
		return l.start(updated), nil
	}
	return nil, fmt.Errorf("lease %s/%s keeps changing under us; is another run starting?", ns, name)
}

// DefaultDuration is how long a lease stays valid without renewal.
const DefaultDuration = 30 * time.Second

func (l *Lock) start(lease *coordv1.Lease) *Lock {
	l.lease = lease
	go l.renew()
	return l
}

// TakeoverNote says whom this lock was taken over from, or "".
func (l *Lock) TakeoverNote() string { return l.takeover }

// watchForRenewal watches the lease from cur's version for up to d and
// reports whether it changed (renewed, released, re-taken or deleted).
func watchForRenewal(ctx context.Context, cs kubernetes.Interface, cur *coordv1.Lease, d time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	leases := cs.CoordinationV1().Leases(cur.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", cur.Name).String()
	lw := &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return leases.Watch(ctx, o)
		},
	}
	_, err := watchtools.Until(wctx, cur.ResourceVersion, lw, func(e watch.Event) (bool, error) {
		return e.Type == watch.Modified || e.Type == watch.Deleted, nil
	})
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, context.Cause(ctx)
	case wctx.Err() != nil || errors.Is(err, watchtools.ErrWatchClosed):
		return false, nil
	default:
		return false, fmt.Errorf("watch lease %s/%s: %w", cur.Namespace, cur.Name, err)
	}
}

// Peek reports the current holder of the lease without taking it, or nil
// when it is free.
func Peek(ctx context.Context, cs kubernetes.Interface, ns, name string) (*LockedError, error) {
	cur, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if heldBy(cur) == "" {
		return nil, nil
	}
	return lockedError(cur), nil
}

func heldBy(l *coordv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func lockedError(l *coordv1.Lease) *LockedError {
	e := &LockedError{Lease: l.Namespace + "/" + l.Name}
	a := l.Annotations
	pid, _ := strconv.Atoi(a[annHolderPID])
	e.Holder = Holder{User: a[annHolderUser], Host: a[annHolderHost], PID: pid, RunID: a[annHolderRun], Command: a[annHolderCommand],
		BootID: a[annHolderBoot], Start: a[annHolderStart]}
	if l.Spec.AcquireTime != nil {
		e.Since = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		e.RenewedAgo = time.Since(l.Spec.RenewTime.Time)
	}
	return e
}

func (l *Lock) leaseFor(cur *coordv1.Lease, now metav1.MicroTime, takeover string) *coordv1.Lease {
	out := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.ns}}
	if cur != nil {
		out = cur.DeepCopy()
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[annHolderUser] = l.holder.User
	out.Annotations[annHolderHost] = l.holder.Host
	out.Annotations[annHolderPID] = strconv.Itoa(l.holder.PID)
	out.Annotations[annHolderRun] = l.holder.RunID
	out.Annotations[annHolderCommand] = truncate(l.holder.Command, 512)
	out.Annotations[annHolderBoot] = l.holder.BootID
	out.Annotations[annHolderStart] = l.holder.Start
	if takeover != "" {
		out.Annotations[AnnTakeover] = truncate(takeover, 512)
	}
	out.Spec.HolderIdentity = ptr.To(l.holder.Identity())
	out.Spec.LeaseDurationSeconds = ptr.To(int32(l.duration / time.Second))
	out.Spec.AcquireTime = &now
	out.Spec.RenewTime = &now
	if cur != nil {
		out.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
	}
	return out
}

// renew keeps the lease fresh. Losing it (someone took it over, or no
// renewal succeeded for 2/3 of the lease duration) closes Lost: the holder
// fences itself before anyone else may judge the lease abandoned.
func (l *Lock) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.duration / 6)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.duration/6)
		err := l.renewOnce(ctx)
		cancel()
		switch {
		case err == nil:
			lastOK = time.Now()
		case apierrors.IsConflict(err) || time.Since(lastOK) >= 2*l.duration/3:
			l.mu.Lock()
			l.err = fmt.Errorf("lost lease %s/%s: %w", l.ns, l.name, err)
			l.mu.Unlock()
			close(l.lost)
			return
		}
	}
}

func (l *Lock) renewOnce(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	leases := l.cs.CoordinationV1().Leases(l.ns)
	cur := l.lease.DeepCopy()
	for attempt := 0; ; attempt++ {
		if heldBy(cur) != l.holder.Identity() {
			return apierrors.NewConflict(coordv1.Resource("leases"), l.name, fmt.Errorf("held by %s", heldBy(cur)))
		}
		now := metav1.NewMicroTime(time.Now())
		cur.Spec.RenewTime = &now
		updated, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			l.lease = updated
			return nil
		}
		if !apierrors.IsConflict(err) || attempt > 2 {
			return err
		}
		// Someone else wrote the lease (e.g. `pause` set an annotation):
		// still ours as long as the holder is.
		if cur, err = leases.Get(ctx, l.name, metav1.GetOptions{}); err != nil {
			return err
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

// Release stops renewing and frees the lease for the next run.
func (l *Lock) Release(ctx context.Context) error {
	close(l.stop)
	<-l.done
	select {
	case <-l.lost:
		return nil
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	leases := l.cs.CoordinationV1().Leases(l.ns)
	cur := l.lease.DeepCopy()
	for attempt := 0; ; attempt++ {
		if heldBy(cur) != l.holder.Identity() {
			return nil // someone else has it now
		}
		cur.Spec.HolderIdentity = nil
		cur.Spec.RenewTime = nil
		_, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) || attempt > 2 {
			return err
		}
		// Written meanwhile (a pause, say): release the fresh copy if still ours.
		if cur, err = leases.Get(ctx, l.name, metav1.GetOptions{}); err != nil {
			return err
		}
	}
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

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
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
	l.mu.Lock()
	defer l.mu.Unlock()
	leases := l.cs.CoordinationV1().Leases(l.ns)
	cur := l.lease.DeepCopy()
	for attempt := 0; ; attempt++ {
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		if value == nil {
			delete(cur.Annotations, key)
		} else {
			cur.Annotations[key] = *value
		}
		updated, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			l.lease = updated
			return nil
		}
		if !apierrors.IsConflict(err) || attempt > 2 {
			return fmt.Errorf("annotate lease %s/%s: %w", l.ns, l.name, err)
		}
		if cur, err = leases.Get(ctx, l.name, metav1.GetOptions{}); err != nil {
			return err
		}
		if heldBy(cur) != l.holder.Identity() {
			return fmt.Errorf("annotate lease %s/%s: it is held by %s now", l.ns, l.name, heldBy(cur))
		}
	}
}
