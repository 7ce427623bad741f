package lease

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/simtest"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 1}) }

// otherHost is a machine that is not this one: nothing about its processes
// can be known from here.
var otherHost = &Local{Host: "elsewhere", BootID: "b", Start: func(int) string { return "" }}

func TestLockOnlyOneOfTwoConcurrentRuns(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		locks  []*Lock
		errs   []error
		holder = func(run string) Holder { return Holder{User: "alice", Host: "laptop", PID: 42, RunID: run} }
	)
	for _, run := range []string{"run-a", "run-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := Acquire(ctx, c.Client, ns, "rollbook-test", holder(run), LockOptions{Duration: 3 * time.Second, Local: otherHost})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				locks = append(locks, l)
			}
		}()
	}
	wg.Wait()
	if len(locks) != 1 || len(errs) != 1 {
		t.Fatalf("want exactly one winner: %d locks, errors %v", len(locks), errs)
	}
	var le *LockedError
	if !errors.As(errs[0], &le) || le.Holder.User != "alice" || le.ExitCode() != 4 {
		t.Fatalf("loser's error should name the live holder: %v", errs[0])
	}
	if !strings.Contains(errs[0].Error(), "alice on laptop (pid 42") || !strings.Contains(errs[0].Error(), "--steal-lock") {
		t.Fatalf("message does not name the holder and the way out: %v", errs[0])
	}
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(ctx, c.Client, ns, "rollbook-test", holder("run-d"), LockOptions{Local: otherHost})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if l.TakeoverNote() != "" {
		t.Fatalf("a released lease is not a takeover: %q", l.TakeoverNote())
	}
	_ = l.Release(ctx)
}

// deadLease creates a lease held by h, last renewed at renewed.
func deadLease(t *testing.T, cs kubernetes.Interface, ns string, h Holder, renewed time.Time) {
	t.Helper()
	at := metav1.NewMicroTime(renewed)
	_, err := cs.CoordinationV1().Leases(ns).Create(context.Background(), &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "rollbook-test", Namespace: ns, Annotations: map[string]string{
			annHolderUser: h.User, annHolderHost: h.Host, annHolderPID: "0", annHolderRun: h.RunID,
			annHolderBoot: h.BootID, annHolderStart: h.Start}},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(h.Identity()), LeaseDurationSeconds: ptr.To(int32(30)),
			AcquireTime: &at, RenewTime: &at},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h.PID != 0 {
		l, _ := cs.CoordinationV1().Leases(ns).Get(context.Background(), "rollbook-test", metav1.GetOptions{})
		l.Annotations[annHolderPID] = strconv.Itoa(h.PID)
		if _, err := cs.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// A run killed with SIGKILL on this machine: the next run takes over at
// once, with no flag, and records from whom.
func TestTakeoverFromDeadProcessOnThisHostIsImmediate(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	me := ThisMachine()
	victim := Holder{User: "alice", Host: me.Host, PID: dead.Process.Pid, RunID: "killed", BootID: me.BootID, Start: "12345"}
	deadLease(t, c.Client, ns, victim, time.Now()) // renewed just now: the clock says nothing yet
	start := time.Now()
	var said []string
	l, err := Acquire(ctx, c.Client, ns, "rollbook-test", Holder{User: "alice", Host: me.Host, PID: os.Getpid(), RunID: "resume"},
		LockOptions{Notify: func(m string) { said = append(said, m) }})
	if err != nil {
		t.Fatalf("resume after kill -9 on the same host: %v", err)
	}
	defer func() { _ = l.Release(ctx) }()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("takeover of a dead local holder took %s; it must be immediate", took)
	}
	if !strings.Contains(l.TakeoverNote(), victim.Identity()) || !strings.Contains(l.TakeoverNote(), "no longer exists") {
		t.Fatalf("takeover note: %q", l.TakeoverNote())
	}
	lease, _ := c.Client.CoordinationV1().Leases(ns).Get(ctx, "rollbook-test", metav1.GetOptions{})
	if !strings.Contains(lease.Annotations[AnnTakeover], victim.Identity()) {
		t.Fatalf("takeover not recorded on the lease: %v", lease.Annotations)
	}
	if len(said) == 0 || !strings.Contains(strings.Join(said, "\n"), "took over from") {
		t.Fatalf("takeover not printed: %q", said)
	}
}

// The holder's process is alive on this host: refused at once, no waiting.
func TestLiveHolderOnThisHostIsRefusedAtOnce(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	me := ThisMachine()
	live := Holder{User: "alice", Host: me.Host, PID: os.Getpid(), RunID: "live", BootID: me.BootID, Start: processStart(os.Getpid())}
	deadLease(t, c.Client, ns, live, time.Now().Add(-time.Hour)) // an old renewal by a skewed clock proves nothing
	start := time.Now()
	_, err := Acquire(ctx, c.Client, ns, "rollbook-test", Holder{User: "bob", Host: me.Host, PID: 1, RunID: "second"}, LockOptions{})
	var le *LockedError
	if !errors.As(err, &le) || le.Holder.RunID != "live" {
		t.Fatalf("live local holder: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("refusing a live local holder took %s", took)
	}
}

// A holder on another machine that stopped renewing is taken over once this
// machine has watched the lease unchanged for its duration plus a margin.
func TestTakeoverFromAnotherHostAfterExpiryOnLocalClock(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	victim := Holder{User: "bob", Host: "ci-runner", PID: 7, RunID: "dead", BootID: "x", Start: "1"}
	// Renewed "in the future" by a skewed clock: judged locally, it still expires.
	deadLease(t, c.Client, ns, victim, time.Now().Add(time.Hour))
	// Its holder said it renews within 2 s: that, not ours, is what is waited out.
	held, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, "rollbook-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.Spec.LeaseDurationSeconds = ptr.To(int32(2))
	if _, err := c.Client.CoordinationV1().Leases(ns).Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := Acquire(ctx, c.Client, ns, "rollbook-test", Holder{User: "alice", Host: "laptop", PID: 1, RunID: "new"},
		LockOptions{Duration: 30 * time.Second, Margin: 7500 * time.Millisecond, Local: &Local{Host: "laptop", Start: processStart}})
	if err != nil {
		t.Fatalf("takeover after expiry: %v", err)
	}
	defer func() { _ = l.Release(ctx) }()
	took := time.Since(start)
	if took < 2500*time.Millisecond || took > 10*time.Second {
		t.Fatalf("took over after %s; want the lease watched unchanged for 2.5s first", took)
	}
	if !strings.Contains(l.TakeoverNote(), "not renewed for") {
		t.Fatalf("takeover note: %q", l.TakeoverNote())
	}
}

// --steal-lock takes over even a live holder, which notices at its next
// renewal and stops acting.
func TestStealLockMakesTheLiveVictimStop(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	victim, err := Acquire(ctx, c.Client, ns, "rollbook-test", Holder{User: "bob", Host: "ci", PID: 7, RunID: "stuck"},
		LockOptions{Duration: 3 * time.Second, Local: otherHost})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := victim.WithLock(ctx)
	defer cancel()
	var said []string
	thief, err := Acquire(ctx, c.Client, ns, "rollbook-test", Holder{User: "alice", Host: "laptop", PID: 1, RunID: "steal"},
		LockOptions{Steal: true, Local: otherHost, Notify: func(m string) { said = append(said, m) }})
	if err != nil {
		t.Fatalf("steal: %v", err)
	}
	defer func() { _ = thief.Release(ctx) }()
	if !strings.Contains(strings.Join(said, "\n"), "stops acting") {
		t.Fatalf("--steal-lock must say what it does: %q", said)
	}
	select {
	case <-runCtx.Done():
		if !strings.Contains(context.Cause(runCtx).Error(), "lost lease") {
			t.Fatalf("cause: %v", context.Cause(runCtx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("losing the lease did not stop the victim")
	}
}

// A holder that cannot renew fences itself within 2/3 of the duration,
// before any other machine may judge the lease abandoned.
func TestHolderFencesItselfWhenItCannotRenew(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	l, err := Acquire(ctx, c.Client, ns, "rollbook-test", Holder{User: "bob", Host: "ci", PID: 7, RunID: "cut-off"},
		LockOptions{Duration: 3 * time.Second, Local: otherHost})
	if err != nil {
		t.Fatal(err)
	}
	unreachable, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.cs = unreachable
	l.mu.Unlock()
	start := time.Now()
	select {
	case <-l.Lost():
		if took := time.Since(start); took > 2500*time.Millisecond {
			t.Fatalf("fenced after %s; must be within 2/3 of 3s (+ a renewal period)", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a holder that cannot renew kept acting")
	}
}

func TestRedactArgs(t *testing.T) {
	got := strings.Join(RedactArgs([]string{"kubectl-tt", "--token", "s3cret", "--token=abc", "--context", "prod", "--password=pw"}), " ")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "abc") || strings.Contains(got, "pw") || !strings.Contains(got, "--context prod") {
		t.Fatalf("redacted: %s", got)
	}
}
