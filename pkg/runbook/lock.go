package runbook

import (
	"context"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Lease annotations describing the holder, for the "who has it" message.
const (
	annHolderUser    = "rollbook.dev/holder-user"
	annHolderHost    = "rollbook.dev/holder-host"
	annHolderPID     = "rollbook.dev/holder-pid"
	annHolderRun     = "rollbook.dev/holder-run"
	annHolderCommand = "rollbook.dev/holder-command"
)

// Holder identifies a run.
type Holder struct {
	User    string
	Host    string
	PID     int
	RunID   string
	Command string
}

// Identity is the holder "user@host/pid/run".
func (h Holder) Identity() string {
	return fmt.Sprintf("%s@%s/%d/%s", h.User, h.Host, h.PID, h.RunID)
}

// CurrentHolder describes this process, asking the API server who we are.
func CurrentHolder(ctx context.Context, cs kubernetes.Interface, runID string) Holder {
	host, _ := os.Hostname()
	return Holder{User: WhoAmI(ctx, cs), Host: host, PID: os.Getpid(), RunID: runID, Command: strings.Join(RedactArgs(os.Args), " ")}
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
	RenewedAgo time.Duration
	Stale      bool
}

func (e *LockedError) Error() string {
	who := fmt.Sprintf("%s on %s (pid %d, run %s)", e.Holder.User, e.Holder.Host, e.Holder.PID, e.Holder.RunID)
	if e.Stale {
		return fmt.Sprintf("lease %s is held by %s since %s, but it has not been renewed for %s: that run probably died. "+
			"If no one is running it, re-run with --steal-lock", e.Lease, who, e.Since.Format(time.RFC3339), e.RenewedAgo.Round(time.Second))
	}
	return fmt.Sprintf("another run holds lease %s: %s since %s (renewed %s ago). Wait for it to finish, or stop it; a second run would fight it",
		e.Lease, who, e.Since.Format(time.RFC3339), e.RenewedAgo.Round(time.Second))
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
}

// LockOptions tune Acquire.
type LockOptions struct {
	// Duration after the last renewal at which a holder counts as dead.
	Duration time.Duration
	// Steal takes over a lease whose holder stopped renewing. A live holder
	// is never displaced.
	Steal bool
}

// Acquire takes the Lease ns/name for holder. It fails with *LockedError
// when someone else holds it.
func Acquire(ctx context.Context, cs kubernetes.Interface, ns, name string, holder Holder, o LockOptions) (*Lock, error) {
	if o.Duration == 0 {
		o.Duration = 30 * time.Second
	}
	l := &Lock{cs: cs, ns: ns, name: name, holder: holder, duration: o.Duration,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	leases := cs.CoordinationV1().Leases(ns)
	for attempt := 0; attempt < 5; attempt++ {
		now := metav1.NewMicroTime(time.Now())
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			created, err := leases.Create(ctx, l.leaseFor(nil, now), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("create lease %s/%s: %w", ns, name, err)
			}
			l.lease = created
			go l.renew()
			return l, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read lease %s/%s: %w", ns, name, err)
		}
		if held := heldBy(cur); held != "" && held != holder.Identity() {
			lerr := lockedError(cur, o.Duration)
			if !lerr.Stale || !o.Steal {
				return nil, lerr
			}
		}
		updated, err := leases.Update(ctx, l.leaseFor(cur, now), metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("take lease %s/%s: %w", ns, name, err)
		}
		l.lease = updated
		go l.renew()
		return l, nil
	}
	return nil, fmt.Errorf("lease %s/%s keeps changing under us; is another run starting?", ns, name)
}

// Peek reports the current holder of the lease without taking it, or nil
// when it is free.
func Peek(ctx context.Context, cs kubernetes.Interface, ns, name string, duration time.Duration) (*LockedError, error) {
	if duration == 0 {
		duration = 30 * time.Second
	}
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
	return lockedError(cur, duration), nil
}

func heldBy(l *coordv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func lockedError(l *coordv1.Lease, d time.Duration) *LockedError {
	e := &LockedError{Lease: l.Namespace + "/" + l.Name}
	a := l.Annotations
	pid, _ := strconv.Atoi(a[annHolderPID])
	e.Holder = Holder{User: a[annHolderUser], Host: a[annHolderHost], PID: pid, RunID: a[annHolderRun], Command: a[annHolderCommand]}
	if l.Spec.AcquireTime != nil {
		e.Since = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		e.RenewedAgo = time.Since(l.Spec.RenewTime.Time)
	}
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	e.Stale = e.RenewedAgo > d
	return e
}

func (l *Lock) leaseFor(cur *coordv1.Lease, now metav1.MicroTime) *coordv1.Lease {
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
	out.Spec.HolderIdentity = ptr.To(l.holder.Identity())
	out.Spec.LeaseDurationSeconds = ptr.To(int32(l.duration / time.Second))
	out.Spec.AcquireTime = &now
	out.Spec.RenewTime = &now
	if cur != nil {
		out.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
	}
	return out
}

// renew keeps the lease fresh. Losing it (someone stole it, or the API
// server stayed unreachable past the lease duration) closes Lost.
func (l *Lock) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.duration / 3)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.duration/3)
		err := l.renewOnce(ctx)
		cancel()
		switch {
		case err == nil:
			lastOK = time.Now()
		case apierrors.IsConflict(err) || time.Since(lastOK) > l.duration:
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
	cur := l.lease.DeepCopy()
	if heldBy(cur) != l.holder.Identity() {
		return apierrors.NewConflict(coordv1.Resource("leases"), l.name, fmt.Errorf("held by %s", heldBy(cur)))
	}
	now := metav1.NewMicroTime(time.Now())
	cur.Spec.RenewTime = &now
	updated, err := l.cs.CoordinationV1().Leases(l.ns).Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = updated
	return nil
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
	cur := l.lease.DeepCopy()
	l.mu.Unlock()
	cur.Spec.HolderIdentity = nil
	cur.Spec.RenewTime = nil
	_, err := l.cs.CoordinationV1().Leases(l.ns).Update(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
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
	cur := l.lease.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	if value == nil {
		delete(cur.Annotations, key)
	} else {
		cur.Annotations[key] = *value
	}
	updated, err := l.cs.CoordinationV1().Leases(l.ns).Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("annotate lease %s/%s: %w", l.ns, l.name, err)
	}
	l.lease = updated
	return nil
}
