package lease

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
)

// machineClock is a boot clock for tests: synctest's time, plus the time
// the test made the machine sleep, which Go's monotonic clock (synctest's)
// does not see, as on a suspended laptop. Create it inside the bubble.
type machineClock struct {
	mu     sync.Mutex
	origin time.Time
	asleep time.Duration
}

func newMachineClock() *machineClock { return &machineClock{origin: time.Now()} }

func (m *machineClock) read() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Since(m.origin) + m.asleep
}

// sleep suspends the machine for d: its timers do not fire and time.Now
// does not move, but the boot clock does.
func (m *machineClock) sleep(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asleep += d
}

// takeOver writes the Lease as a run on another machine does once it has
// watched it unchanged for long enough.
func takeOver(s *memStore, by Holder) {
	s.edit(func(l *coordv1.Lease) {
		l.Spec.HolderIdentity = ptr.To(by.Identity())
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	})
}

// A laptop that slept past its Lease while another machine took it over:
// its monotonic clock says no time passed, so no renewal is due, yet its
// next mutation must not go out. Check (what every mutation asks first)
// renews at once, finds the Lease taken and loses the lock, without a
// moment passing.
func TestASleptHolderLearnsItLostTheLeaseBeforeItsNextMutation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		clock := newMachineClock()
		victim := acquire(t, s, runOn("laptop"), LockOptions{BootClock: clock.read})
		defer func() { _ = victim.Release(t.Context()) }()
		time.Sleep(d / 6) // one renewal
		synctest.Wait()
		if err := victim.Check(t.Context()); err != nil {
			t.Fatalf("a fresh lock refused a mutation: %v", err)
		}
		clock.sleep(time.Hour)
		takeOver(s, runOn("ci"))
		writes := s.writes
		start := time.Now()
		err := victim.Check(t.Context())
		if err == nil {
			t.Fatal("the slept holder may mutate after an hour asleep, though another run holds its Lease")
		}
		// At once: the renewal's conflict, a read after the retry backoff.
		if time.Since(start) > time.Second || !isLost(victim) || !strings.Contains(err.Error(), "held by "+runOn("ci").Identity()) {
			t.Fatalf("after %s: lost %v, error %v; want it lost at once, naming the new holder", time.Since(start), isLost(victim), err)
		}
		if cur, _ := s.Get(t.Context()); heldBy(cur) != runOn("ci").Identity() || s.writes != writes {
			t.Fatalf("the slept holder wrote the Lease (%d writes, holder %s)", s.writes-writes, heldBy(cur))
		}
	})
}

// A holder that slept while nobody took its Lease keeps it: the renewal
// Check makes proves it still its own, however long it slept.
func TestASleptHolderKeepsAnUntakenLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		clock := newMachineClock()
		l := acquire(t, s, runOn("laptop"), LockOptions{BootClock: clock.read})
		defer func() { _ = l.Release(t.Context()) }()
		clock.sleep(time.Hour)
		writes := s.writes
		if err := l.Check(t.Context()); err != nil || isLost(l) {
			t.Fatalf("an untaken Lease was given up after a sleep: %v", err)
		}
		if s.writes != writes+1 {
			t.Fatalf("want one renewal before the mutation, got %d writes", s.writes-writes)
		}
		if err := l.Check(t.Context()); err != nil || s.writes != writes+1 {
			t.Fatalf("a just-renewed lock renewed again (%d writes) or refused: %v", s.writes-writes, err)
		}
	})
}

// Without a mutation to ask, the renewer itself notices the sleep within
// a second of waking (awakePoll), not at its next tick, which the stopped
// monotonic clock put off: the run's context is cancelled then.
func TestTheRenewerNoticesASleepWithinASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		clock := newMachineClock()
		victim := acquire(t, s, runOn("laptop"), LockOptions{BootClock: clock.read})
		defer func() { _ = victim.Release(t.Context()) }()
		runCtx, cancel := victim.WithLock(t.Context())
		defer cancel()
		time.Sleep(d/6 + 500*time.Millisecond) // just after a renewal
		synctest.Wait()
		clock.sleep(time.Hour)
		takeOver(s, runOn("ci"))
		start := time.Now()
		<-runCtx.Done()
		if took := time.Since(start); took > awakePoll {
			t.Fatalf("the run stopped %s after waking, want within %s", took, awakePoll)
		}
		if !strings.Contains(victim.Err().Error(), "held by") {
			t.Fatalf("cause: %v", victim.Err())
		}
	})
}

// A Lease deleted under its holder is a lost Lease: the holder's next
// renewal finds it gone and says so; one asked to look (a watch saw the
// deletion) finds it at once. It never recreates it.
func TestADeletedLeaseIsLost(t *testing.T) {
	for _, told := range []bool{false, true} {
		name := "at the next renewal"
		if told {
			name = "at once when a watch saw it"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newMemStore()
				l := acquire(t, s, runOn("ci"), LockOptions{})
				defer func() { _ = l.Release(t.Context()) }()
				time.Sleep(time.Second)
				s.remove()
				start := time.Now()
				if told {
					l.Recheck()
				}
				<-l.Lost()
				want := time.Duration(0)
				if !told {
					want = d/6 - time.Second
				}
				if took := time.Since(start); took != want {
					t.Fatalf("lost %s after the deletion, want %s", took, want)
				}
				if err := l.Err(); !strings.Contains(err.Error(), "lost lease ns/rollbook-test: it was deleted") {
					t.Fatalf("cause: %v", err)
				}
				if err := l.Check(t.Context()); err == nil {
					t.Fatal("a holder whose Lease was deleted may still mutate")
				}
				if _, err := s.Get(t.Context()); !apierrors.IsNotFound(err) {
					t.Fatalf("the Lease was recreated: %v", err)
				}
				if err := l.Release(t.Context()); err != nil {
					t.Fatalf("releasing a deleted Lease: %v", err)
				}
			})
		})
	}
}

// A lock whose renewals failed for a third of its duration (the API server
// is slow) must prove itself before a mutation: the mutation waits for one
// renewal; if that fails too, the mutation fails, and the lock is kept
// until its fence.
func TestAStaleLockRenewsBeforeAMutation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		view := &cutStore{Store: s}
		l := acquire(t, view, runOn("ci"), LockOptions{})
		defer func() { _ = l.Release(t.Context()) }()
		view.cutOff(apierrors.NewServiceUnavailable("etcd is slow"))
		time.Sleep(d / 3)
		synctest.Wait()
		err := l.Check(t.Context())
		if err == nil || isLost(l) || !strings.Contains(err.Error(), "cannot confirm that this run still holds lease ns/rollbook-test") {
			t.Fatalf("want the mutation refused and the lock kept: %v (lost %v)", err, isLost(l))
		}
		view.mu.Lock()
		view.cut = false
		view.mu.Unlock()
		if err := l.Check(t.Context()); err != nil {
			t.Fatalf("once the API server answers, the mutation goes: %v", err)
		}
	})
}

// slept is the boot clock's lead over the monotonic one, and since takes
// whichever clock saw more.
func TestClocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMachineClock()
		c := clocks{boot: m.read}
		a := c.now()
		time.Sleep(3 * time.Second)
		m.sleep(time.Minute)
		b := c.now()
		if got := slept(a, b); got != time.Minute {
			t.Errorf("slept %s, want 1m", got)
		}
		if got := c.since(a); got != time.Minute+3*time.Second {
			t.Errorf("since %s, want 1m3s", got)
		}
		back := clocks{boot: func() time.Duration { return m.read() - time.Hour }} // a wall clock set back
		if got := back.since(b); got != 0 {
			t.Errorf("a clock set back made since %s, want the monotonic 0s", got)
		}
	})
	if SystemBootClock() <= 0 {
		t.Error("no boot clock")
	}
}
