// Package lease is the lock that keeps two runs of a runbook from acting at
// once: a coordination.k8s.io Lease, renewed while the run acts, that a new
// run takes over without ceremony once its holder is provably gone.
//
// The rule is one pure function, Decide, over the holder record read from
// the Lease and what this machine knows by itself (Facts). Acquire and the
// Lock's renewals read and write the Lease through a Store, the API server
// in production and memory in tests, which run the lock on a fake clock.
package lease

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
)

// Lease annotations describing the holder, for the "who has it" message and
// for judging, on the holder's own host, whether it is alive.
const (
	annHolderUser    = "rollbook.dev/holder-user"
	annHolderHost    = "rollbook.dev/holder-host"
	annHolderPID     = "rollbook.dev/holder-pid"
	annHolderRun     = "rollbook.dev/holder-run"
	annHolderCommand = "rollbook.dev/holder-command"
	annHolderMachine = "rollbook.dev/holder-machine-id"
	annHolderBoot    = "rollbook.dev/holder-boot-id"
	annHolderPIDNS   = "rollbook.dev/holder-pid-namespace"
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
	// MachineID, BootID and PIDNamespace say where PID means something
	// (digests, see Local); Start identifies the process beyond its pid,
	// so a pid reused after the holder died is not mistaken for it.
	MachineID    string
	BootID       string
	PIDNamespace string
	Start        string
}

// Identity is the holder "user@host/pid/run".
func (h Holder) Identity() string {
	return fmt.Sprintf("%s@%s/%d/%s", h.User, h.Host, h.PID, h.RunID)
}

// CurrentHolder describes this process, asking the API server who we are.
func CurrentHolder(ctx context.Context, cs kubernetes.Interface, runID string) Holder {
	host, _ := os.Hostname()
	pid := os.Getpid()
	m := ThisMachine()
	return Holder{User: WhoAmI(ctx, cs), Host: host, PID: pid, RunID: runID, Command: strings.Join(RedactArgs(os.Args), " "),
		MachineID: m.MachineID, BootID: m.BootID, PIDNamespace: m.PIDNamespace, Start: inspect(pid).Start}
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
	// BootClock is a clock that runs on while the machine is suspended
	// (default SystemBootClock); tests give a fake one to make a machine
	// sleep.
	BootClock BootClock
}

// DefaultDuration is how long a lease stays valid without renewal.
const DefaultDuration = 30 * time.Second

// Acquire takes the Lease ns/name for holder. A holder that is provably
// gone (it ran on this host and boot, and its process no longer exists) is
// taken over at once; any other holder is watched, and taken over only once
// this machine has seen the lease unchanged for longer than its duration
// plus a margin — judged on the local clock, so clock skew never makes a
// live lock look dead. A live holder makes Acquire fail with *LockedError.
func Acquire(ctx context.Context, cs kubernetes.Interface, ns, name string, holder Holder, o LockOptions) (*Lock, error) {
	return AcquireIn(ctx, KubeStore(cs, ns, name), holder, o)
}

// AcquireIn is Acquire on the Lease s holds.
func AcquireIn(ctx context.Context, s Store, holder Holder, o LockOptions) (*Lock, error) {
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
	if o.BootClock == nil {
		o.BootClock = SystemBootClock
	}
	clk := clocks{boot: o.BootClock}
	ns, name := s.Key()
	policy := Policy{Steal: o.Steal, Duration: o.Duration, Margin: o.Margin}
	// The version of the Lease this machine has seen, since when by its
	// own clock, and whether it has seen it change.
	var (
		seen     string
		seenAt   time.Time
		changed  bool
		watching bool
		lock     *Lock
	)
	err := kube.RetryOnConflict(ctx, func() error {
		for {
			cur, err := s.Get(ctx)
			if apierrors.IsNotFound(err) {
				cur, err = nil, nil
			}
			if err != nil {
				return fmt.Errorf("read lease %s/%s: %w", ns, name, err)
			}
			sent := clk.now()
			now := sent.mono
			var f Facts
			if cur != nil {
				if cur.ResourceVersion != seen {
					changed = changed || seen != ""
					seen, seenAt = cur.ResourceVersion, now
				}
				f = o.Local.Facts(holderOf(cur))
				f.Unchanged, f.Changed = now.Sub(seenAt), changed
			}
			d := Decide(RecordOf(cur), holder, f, policy)
			switch d.Action {
			case Create:
				created, err := s.Create(ctx, HeldLease(ns, name, holder, o.Duration, kube.ServerNow()))
				if err != nil {
					return fmt.Errorf("create lease %s/%s: %w", ns, name, err)
				}
				lock = newLock(s, holder, o.Duration, created, "", sent, clk)
				return nil
			case Refuse:
				return lockedError(cur)
			case Watch:
				if !watching {
					watching = true
					o.Notify(fmt.Sprintf("lease %s is held by %s; watching it for up to %s: a live run renews it, "+
						"a dead one is taken over", ns+"/"+name, lockedError(cur).who(), d.Wait.Round(time.Second)))
				}
				if err := s.WaitChange(ctx, cur, d.Wait-f.Unchanged); err != nil {
					return err
				}
				continue // read it again: changed, or watched long enough
			}
			note := ""
			if d.Action == TakeOver {
				if d.Reason == ReasonSteal {
					o.Notify(fmt.Sprintf("--steal-lock: taking lease %s from %s; if that run is still alive it stops acting "+
						"at its next renewal (within %s)", ns+"/"+name, lockedError(cur).who(), o.Duration/3))
				}
				note = fmt.Sprintf("%s took over from %s at %s: %s", holder.Identity(), heldBy(cur),
					kube.ServerNow().UTC().Format(time.RFC3339), d.Reason)
			}
			next := cur.DeepCopy()
			hold(next, holder, o.Duration, kube.ServerNow(), note)
			next.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
			updated, err := s.Update(ctx, next)
			if err != nil {
				return fmt.Errorf("take lease %s/%s: %w", ns, name, err)
			}
			if note != "" {
				o.Notify("lock: " + note)
			}
			lock = newLock(s, holder, o.Duration, updated, note, sent, clk)
			return nil
		}
	})
	if kube.IsWriteConflict(err) {
		return nil, fmt.Errorf("lease %s/%s keeps changing under us; is another run starting? %w", ns, name, err)
	}
	if err != nil {
		return nil, err
	}
	return lock, nil
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

// holderOf reads the holder annotations of l.
func holderOf(l *coordv1.Lease) Holder {
	a := l.Annotations
	pid, _ := strconv.Atoi(a[annHolderPID])
	return Holder{User: a[annHolderUser], Host: a[annHolderHost], PID: pid, RunID: a[annHolderRun], Command: a[annHolderCommand],
		MachineID: a[annHolderMachine], BootID: a[annHolderBoot], PIDNamespace: a[annHolderPIDNS], Start: a[annHolderStart]}
}

func lockedError(l *coordv1.Lease) *LockedError {
	e := &LockedError{Lease: l.Namespace + "/" + l.Name, Holder: holderOf(l)}
	if l.Spec.AcquireTime != nil {
		e.Since = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		e.RenewedAgo = kube.ServerNow().Sub(l.Spec.RenewTime.Time)
	}
	return e
}

// HeldLease is a new Lease ns/name as h holds it, acquired and renewed at
// at for d. Tests use it to leave a Lease behind as a holder would.
func HeldLease(ns, name string, h Holder, d time.Duration, at time.Time) *coordv1.Lease {
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	hold(l, h, d, at, "")
	return l
}

// hold makes l held by h from at, for d; takeover, when set, is recorded.
func hold(l *coordv1.Lease, h Holder, d time.Duration, at time.Time, takeover string) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	a := l.Annotations
	a[annHolderUser] = h.User
	a[annHolderHost] = h.Host
	a[annHolderPID] = strconv.Itoa(h.PID)
	a[annHolderRun] = h.RunID
	a[annHolderCommand] = truncate(h.Command, 512)
	a[annHolderMachine] = h.MachineID
	a[annHolderBoot] = h.BootID
	a[annHolderPIDNS] = h.PIDNamespace
	a[annHolderStart] = h.Start
	if takeover != "" {
		a[AnnTakeover] = truncate(takeover, 512)
	}
	now := metav1.NewMicroTime(at)
	l.Spec.HolderIdentity = ptr.To(h.Identity())
	l.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second))
	l.Spec.AcquireTime = &now
	l.Spec.RenewTime = &now
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
