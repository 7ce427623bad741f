package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// These tests run the lock on synctest's fake clock against memStore: each
// time asserted is exact, and none needs a cluster.

const d = 30 * time.Second // the lease duration of these tests

// elsewhere is a machine none of these holders ran on.
var elsewhere = &Local{MachineID: "m-elsewhere", BootID: "b-elsewhere", PIDNamespace: "pid:[9]",
	Inspect: func(int) Process { return Process{Known: true} }}

func runOn(h string) Holder {
	return Holder{User: "bob", Host: h, PID: 7, RunID: "run-" + h, MachineID: "m-" + h, BootID: "b-" + h, PIDNamespace: "pid:[1]", Start: "1"}
}

func acquire(t *testing.T, s Store, h Holder, o LockOptions) *Lock {
	t.Helper()
	if o.Duration == 0 {
		o.Duration = d
	}
	if o.Local == nil {
		o.Local = elsewhere
	}
	if o.BootClock == nil {
		o.BootClock = newMachineClock().read
	}
	l, err := AcquireIn(t.Context(), s, h, o)
	if err != nil {
		t.Fatalf("%s: %v", h.Identity(), err)
	}
	return l
}

func isLost(l *Lock) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

// A holder that cannot renew, whether its requests fail or hang, fences
// itself exactly 2/3 of the duration after its last renewal, and not
// before: a failing renewal or two are survived.
func TestHolderFencesItselfAtTwoThirdsOfTheDuration(t *testing.T) {
	for name, fail := range map[string]error{
		"requests hang": nil,
		"requests fail": apierrors.NewServiceUnavailable("etcd is down"),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newMemStore()
				view := &cutStore{Store: s}
				l := acquire(t, view, runOn("ci"), LockOptions{})
				defer func() { _ = l.Release(t.Context()) }()
				time.Sleep(d / 6) // one renewal goes through
				synctest.Wait()
				last, _ := s.Get(t.Context())
				if last.ResourceVersion != "2" {
					t.Fatalf("want the acquisition and one renewal written, lease at version %s", last.ResourceVersion)
				}
				view.cutOff(fail)
				time.Sleep(2*d/3 - time.Millisecond)
				synctest.Wait()
				if isLost(l) {
					t.Fatalf("fenced %s after the last renewal; must hold on until 2/3 of %s", time.Since(last.Spec.RenewTime.Time), d)
				}
				<-l.Lost()
				if took := time.Since(last.Spec.RenewTime.Time); took != 2*d/3 {
					t.Fatalf("fenced %s after the last renewal, want %s", took, 2*d/3)
				}
				if !strings.Contains(l.Err().Error(), "lost lease ns/rollbook-test") {
					t.Fatalf("cause: %v", l.Err())
				}
			})
		})
	}
}

// The property fencing exists for: a holder cut off from the API server
// stops acting before a run on another machine may take over, and that run
// waits the holder's duration and a margin after the last change it saw.
func TestACutOffHolderStopsBeforeAnotherMachineTakesOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		view := &cutStore{Store: s}
		victim := acquire(t, view, runOn("ci"), LockOptions{})
		defer func() { _ = victim.Release(t.Context()) }()
		view.cutOff(nil)
		start := time.Now()
		var fenced time.Time
		go func() {
			<-victim.Lost()
			fenced = time.Now()
		}()
		thief := acquire(t, s, runOn("laptop"), LockOptions{})
		defer func() { _ = thief.Release(t.Context()) }()
		took := time.Since(start)
		synctest.Wait()
		if fenced.IsZero() || !fenced.Before(time.Now()) {
			t.Fatalf("the victim had not stopped when the lease was taken over (after %s)", took)
		}
		if took != d+d/6 {
			t.Fatalf("taken over after %s, want the duration and margin, %s", took, d+d/6)
		}
		if !strings.Contains(thief.TakeoverNote(), "took over from "+runOn("ci").Identity()) ||
			!strings.Contains(thief.TakeoverNote(), "not renewed for 35s as seen from this machine") {
			t.Fatalf("takeover note: %q", thief.TakeoverNote())
		}
	})
}

// A holder on another machine that stopped renewing is taken over once this
// machine has watched its Lease unchanged for the holder's own duration
// plus a margin, however far its clock put renewTime.
func TestTakeoverWaitsOutTheHoldersDurationOnThisClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		dead := HeldLease("ns", "rollbook-test", runOn("ci"), 2*time.Second, time.Now().Add(time.Hour))
		if _, err := s.Create(t.Context(), dead); err != nil {
			t.Fatal(err)
		}
		var said []string
		start := time.Now()
		l := acquire(t, s, runOn("laptop"), LockOptions{Margin: 7500 * time.Millisecond, Notify: func(m string) { said = append(said, m) }})
		defer func() { _ = l.Release(t.Context()) }()
		// 2 s and the margin scaled to it (0.5 s), at least 1 s.
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("took over after %s, want 3s", took)
		}
		if !strings.Contains(l.TakeoverNote(), "not renewed for 3s") {
			t.Fatalf("takeover note: %q", l.TakeoverNote())
		}
		msgs := strings.Join(said, "\n")
		if !strings.Contains(msgs, "watching it for up to 3s") || !strings.Contains(msgs, "lock: "+l.TakeoverNote()) {
			t.Fatalf("what it waits for and whom it took over from are not said: %q", said)
		}
		cur, _ := s.Get(t.Context())
		if cur.Annotations[AnnTakeover] != l.TakeoverNote() || *cur.Spec.LeaseTransitions != 1 {
			t.Fatalf("takeover not recorded on the lease: %v, transitions %v", cur.Annotations, *cur.Spec.LeaseTransitions)
		}
	})
}

// A live holder on another machine renews while it is watched: refused as
// soon as the renewal is seen, naming the holder.
func TestLiveHolderElsewhereIsRefusedAtItsRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		live := acquire(t, s, runOn("ci"), LockOptions{})
		defer func() { _ = live.Release(t.Context()) }()
		start := time.Now()
		_, err := AcquireIn(t.Context(), s, runOn("laptop"), LockOptions{Duration: d, Local: elsewhere})
		var le *LockedError
		if !errors.As(err, &le) || le.Holder.RunID != "run-ci" || le.ExitCode() != 4 {
			t.Fatalf("want the live holder named: %v", err)
		}
		if took := time.Since(start); took != d/6 {
			t.Fatalf("refused after %s, want at the holder's renewal (%s)", took, d/6)
		}
		if !strings.Contains(err.Error(), "bob on ci (pid 7, run run-ci)") || !strings.Contains(err.Error(), "--steal-lock") {
			t.Fatalf("message does not name the holder and the way out: %v", err)
		}
	})
}

// Two runs starting together: exactly one gets the lock, the other is told
// who has it.
func TestOnlyOneOfTwoConcurrentRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			locks []*Lock
			errs  []error
		)
		for _, host := range []string{"a", "b"} {
			wg.Go(func() {
				l, err := AcquireIn(t.Context(), s, runOn(host), LockOptions{Duration: d, Local: elsewhere})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else {
					locks = append(locks, l)
				}
			})
		}
		wg.Wait()
		if len(locks) != 1 || len(errs) != 1 {
			t.Fatalf("want exactly one winner: %d locks, errors %v", len(locks), errs)
		}
		var le *LockedError
		if !errors.As(errs[0], &le) || le.Holder.Identity() != locks[0].holder.Identity() {
			t.Fatalf("the loser's error does not name the winner: %v", errs[0])
		}
		if err := locks[0].Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Released: the next run claims it at once, and that is no takeover.
		start := time.Now()
		l := acquire(t, s, runOn("c"), LockOptions{})
		defer func() { _ = l.Release(t.Context()) }()
		if l.TakeoverNote() != "" || time.Since(start) != 0 {
			t.Fatalf("a released lease is claimed at once, not taken over: %q after %s", l.TakeoverNote(), time.Since(start))
		}
	})
}

// On the holder's own host, boot and pid namespace its process decides at
// once: gone is taken over with no flag and no wait, alive is refused.
func TestLocalHolderIsJudgedAtOnce(t *testing.T) {
	h := runOn("laptop")
	thisHost := func(p Process) *Local {
		return &Local{MachineID: h.MachineID, BootID: h.BootID, PIDNamespace: h.PIDNamespace, Inspect: func(pid int) Process {
			if pid != h.PID {
				return Process{Known: true}
			}
			return p
		}}
	}
	t.Run("its process is gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore()
			if _, err := s.Create(t.Context(), HeldLease("ns", "rollbook-test", h, d, time.Now())); err != nil {
				t.Fatal(err)
			}
			me := h
			me.PID, me.RunID = 8, "resume"
			start := time.Now()
			l := acquire(t, s, me, LockOptions{Local: thisHost(Process{Known: true})})
			defer func() { _ = l.Release(t.Context()) }()
			if took := time.Since(start); took != 0 || !strings.Contains(l.TakeoverNote(), "its process (pid 7 on laptop) no longer exists") {
				t.Fatalf("took over after %s, note %q; want at once, saying why", took, l.TakeoverNote())
			}
		})
	})
	t.Run("its process runs", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newMemStore()
			// Renewed an hour ago by its clock: that proves nothing.
			if _, err := s.Create(t.Context(), HeldLease("ns", "rollbook-test", h, d, time.Now().Add(-time.Hour))); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := AcquireIn(t.Context(), s, runOn("other"), LockOptions{Local: thisHost(Process{Known: true, Exists: true, Start: h.Start})})
			var le *LockedError
			if !errors.As(err, &le) || le.Holder.RunID != h.RunID || time.Since(start) != 0 {
				t.Fatalf("a live local holder must be refused at once: %v after %s", err, time.Since(start))
			}
		})
	})
}

// --steal-lock takes over a live holder at once; the victim notices at its
// next renewal and stops acting.
func TestStealLockMakesTheLiveVictimStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		victim := acquire(t, s, runOn("ci"), LockOptions{})
		runCtx, cancel := victim.WithLock(t.Context())
		defer cancel()
		var said []string
		start := time.Now()
		thief := acquire(t, s, runOn("laptop"), LockOptions{Steal: true, Notify: func(m string) { said = append(said, m) }})
		defer func() { _ = thief.Release(t.Context()) }()
		if time.Since(start) != 0 || !strings.Contains(strings.Join(said, "\n"), "stops acting") {
			t.Fatalf("--steal-lock must take over at once and say what it does: %q", said)
		}
		<-runCtx.Done()
		// Its renewal conflicts, reads the Lease again and finds it taken.
		if took := time.Since(start); took < d/6 || took > d/6+time.Second {
			t.Fatalf("the victim stopped %s after the theft, want at its next renewal (%s)", took, d/6)
		}
		if cause := context.Cause(runCtx).Error(); !strings.Contains(cause, "lost lease") || !strings.Contains(cause, "held by bob@laptop") {
			t.Fatalf("cause: %v", cause)
		}
		if err := victim.Release(t.Context()); err != nil {
			t.Fatalf("a lost lock releases nothing: %v", err)
		}
		if cur, _ := s.Get(t.Context()); heldBy(cur) != runOn("laptop").Identity() {
			t.Fatalf("the victim's release freed the thief's lease: %v", heldBy(cur))
		}
	})
}

// Another writer (a pause) makes the lock's next write conflict: the
// renewal reads the Lease again and keeps that writer's change; the lock's
// own annotations and its release go through the same way.
func TestForeignWritesSurviveRenewalsAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		l := acquire(t, s, runOn("ci"), LockOptions{})
		defer func() { _ = l.Release(t.Context()) }()
		start := time.Now()
		s.edit(func(l *coordv1.Lease) { metav1.SetMetaDataAnnotation(&l.ObjectMeta, AnnPaused, `{"by":"carol"}`) })
		time.Sleep(d/6 + time.Second) // the renewal, its conflict and its retry
		synctest.Wait()
		if isLost(l) {
			t.Fatalf("a foreign write cost the lock: %v", l.Err())
		}
		cur, _ := s.Get(t.Context())
		if cur.Annotations[AnnPaused] == "" || !cur.Spec.RenewTime.After(start) {
			t.Fatalf("renewal lost the pause or did not happen: %v, renewed %v", cur.Annotations, cur.Spec.RenewTime)
		}
		s.edit(func(l *coordv1.Lease) { delete(l.Annotations, AnnPaused) })
		v := "3"
		if err := l.SetAnnotation(t.Context(), "rollbook.dev/max-out-of-service", &v); err != nil {
			t.Fatal(err)
		}
		if got, _ := l.Annotation("rollbook.dev/max-out-of-service"); got != "3" {
			t.Fatalf("annotation read back %q", got)
		}
		s.edit(func(l *coordv1.Lease) { l.Labels = map[string]string{"x": "y"} })
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		cur, _ = s.Get(t.Context())
		if cur.Spec.HolderIdentity != nil || cur.Annotations["rollbook.dev/max-out-of-service"] != "3" || cur.Labels["x"] != "y" {
			t.Fatalf("after release: holder %v, annotations %v, labels %v", cur.Spec.HolderIdentity, cur.Annotations, cur.Labels)
		}
	})
}

// Publish costs no request: the annotation is written by the next renewal,
// and the last value published before Release by the release.
func TestPublishRidesOnTheRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		l := acquire(t, s, runOn("ci"), LockOptions{})
		l.Publish("rollbook.dev/progress", "1")
		synctest.Wait()
		if cur, _ := s.Get(t.Context()); cur.Annotations["rollbook.dev/progress"] != "" {
			t.Fatalf("published before a renewal: %v", cur.Annotations)
		}
		time.Sleep(d/6 + time.Second)
		synctest.Wait()
		if cur, _ := s.Get(t.Context()); cur.Annotations["rollbook.dev/progress"] != "1" {
			t.Fatalf("the renewal did not publish: %v", cur.Annotations)
		}
		l.Publish("rollbook.dev/progress", "2")
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if cur, _ := s.Get(t.Context()); cur.Annotations["rollbook.dev/progress"] != "2" || cur.Spec.HolderIdentity != nil {
			t.Fatalf("release did not publish the last value: %v", cur.Annotations)
		}
	})
}
