//go:build e2e

// Package leasetest runs the lock against the real API server of the
// simulated cluster: the create and update races, the watch and this
// host's own processes, which pkg/cli/lease's fake-clock tests stand in
// for with memory.
package leasetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli/lease"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 1}) }

const name = "rollbook-test"

// otherHost is a machine that is not this one: nothing about its processes
// can be known from here.
var otherHost = &lease.Local{MachineID: "elsewhere", BootID: "b", PIDNamespace: "p",
	Inspect: func(int) lease.Process { return lease.Process{Known: true} }}

// thisHost is a holder of this host, boot and pid namespace.
func thisHost(user string, pid int, run, start string) lease.Holder {
	m := lease.ThisMachine()
	return lease.Holder{User: user, Host: "laptop", PID: pid, RunID: run, MachineID: m.MachineID, BootID: m.BootID,
		PIDNamespace: m.PIDNamespace, Start: start}
}

// Two runs race on the API server: one creates the Lease, the other loses
// the create, watches, sees the winner renew and is refused.
func TestOnlyOneOfTwoConcurrentRuns(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		locks []*lease.Lock
		errs  []error
	)
	for _, run := range []string{"run-a", "run-b"} {
		wg.Go(func() {
			h := lease.Holder{User: "alice", Host: "laptop", PID: 42, RunID: run}
			l, err := lease.Acquire(ctx, c.Client, ns, name, h, lease.LockOptions{Duration: 3 * time.Second, Local: otherHost})
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
	var le *lease.LockedError
	if !errors.As(errs[0], &le) || le.Holder.User != "alice" || le.ExitCode() != 4 {
		t.Fatalf("loser's error should name the live holder: %v", errs[0])
	}
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := lease.Acquire(ctx, c.Client, ns, name, lease.Holder{User: "alice", Host: "laptop", PID: 42, RunID: "run-c"},
		lease.LockOptions{Local: otherHost})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	defer func() { _ = l.Release(ctx) }()
	if l.TakeoverNote() != "" {
		t.Fatalf("a released lease is not a takeover: %q", l.TakeoverNote())
	}
}

// A run killed with SIGKILL on this machine: the next run takes over at
// once, with no flag, and the Lease records from whom.
func TestTakeoverFromDeadProcessOnThisHostIsImmediate(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	victim := thisHost("alice", dead.Process.Pid, "killed", "12345")
	if _, err := c.Client.CoordinationV1().Leases(ns).Create(ctx, lease.HeldLease(ns, name, victim, 30*time.Second, time.Now()),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := lease.Acquire(ctx, c.Client, ns, name, thisHost("alice", os.Getpid(), "resume", ""), lease.LockOptions{})
	if err != nil {
		t.Fatalf("resume after kill -9 on the same host: %v", err)
	}
	defer func() { _ = l.Release(ctx) }()
	if !strings.Contains(l.TakeoverNote(), victim.Identity()) || !strings.Contains(l.TakeoverNote(), "no longer exists") {
		t.Fatalf("takeover note: %q", l.TakeoverNote())
	}
	got, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.Annotations[lease.AnnTakeover] != l.TakeoverNote() {
		t.Fatalf("takeover not recorded on the lease: %v %v", err, got.Annotations)
	}
}

// The holder's process is alive on this host: refused at once, however
// old its renewal looks.
func TestLiveHolderOnThisHostIsRefusedAtOnce(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	live := thisHost("alice", os.Getpid(), "live", lease.ThisMachine().Inspect(os.Getpid()).Start)
	if _, err := c.Client.CoordinationV1().Leases(ns).Create(ctx, lease.HeldLease(ns, name, live, 30*time.Second, time.Now().Add(-time.Hour)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := lease.Acquire(ctx, c.Client, ns, name, thisHost("bob", 1, "second", ""), lease.LockOptions{})
	var le *lease.LockedError
	if !errors.As(err, &le) || le.Holder.RunID != "live" {
		t.Fatalf("live local holder: %v", err)
	}
}

// A holder elsewhere that stopped renewing is taken over once the watch
// has shown its Lease unchanged for the holder's duration and a margin.
func TestTakeoverFromAnotherHostAfterItsDurationOnTheWatch(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	victim := lease.Holder{User: "bob", Host: "ci-runner", PID: 7, RunID: "dead", MachineID: "x", BootID: "x", Start: "1"}
	if _, err := c.Client.CoordinationV1().Leases(ns).Create(ctx, lease.HeldLease(ns, name, victim, 2*time.Second, time.Now().Add(time.Hour)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := lease.Acquire(ctx, c.Client, ns, name, lease.Holder{User: "alice", Host: "laptop", PID: 1, RunID: "new"},
		lease.LockOptions{Duration: 30 * time.Second, Margin: 7500 * time.Millisecond, Local: otherHost})
	if err != nil {
		t.Fatalf("takeover after expiry: %v", err)
	}
	defer func() { _ = l.Release(ctx) }()
	// The note is this machine's own measure of how long it watched the
	// Lease unchanged (the timing itself is tested on a fake clock, in
	// pkg/cli/lease): the takeover came from that rule, not another.
	if !strings.Contains(l.TakeoverNote(), "not renewed for 3s") {
		t.Fatalf("takeover note: %q", l.TakeoverNote())
	}
}

// --steal-lock takes over a live holder, which notices at its next renewal
// on the API server and stops acting.
func TestStealLockMakesTheLiveVictimStop(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	victim, err := lease.Acquire(ctx, c.Client, ns, name, lease.Holder{User: "bob", Host: "ci", PID: 7, RunID: "stuck"},
		lease.LockOptions{Duration: 3 * time.Second, Local: otherHost})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := victim.WithLock(ctx)
	defer cancel()
	thief, err := lease.Acquire(ctx, c.Client, ns, name, lease.Holder{User: "alice", Host: "laptop", PID: 1, RunID: "steal"},
		lease.LockOptions{Steal: true, Local: otherHost})
	if err != nil {
		t.Fatalf("steal: %v", err)
	}
	defer func() { _ = thief.Release(ctx) }()
	select {
	case <-runCtx.Done():
		if !strings.Contains(context.Cause(runCtx).Error(), "lost lease") {
			t.Fatalf("cause: %v", context.Cause(runCtx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("losing the lease did not stop the victim")
	}
}
