package runbook

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/simtest"
)

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
			l, err := Acquire(ctx, c.Client, ns, "rollbook-test", holder(run), LockOptions{})
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
	if !errors.As(errs[0], &le) || le.Stale || le.Holder.User != "alice" || le.ExitCode() != 4 {
		t.Fatalf("loser's error should name the live holder: %v", errs[0])
	}
	if !strings.Contains(errs[0].Error(), "alice on laptop (pid 42") {
		t.Fatalf("message does not name the holder: %v", errs[0])
	}
	// --steal-lock never displaces a live holder.
	if _, err := Acquire(ctx, c.Client, ns, "rollbook-test", holder("run-c"), LockOptions{Steal: true}); !errors.As(err, &le) {
		t.Fatalf("stole a live lock: %v", err)
	}
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(ctx, c.Client, ns, "rollbook-test", holder("run-d"), LockOptions{})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	_ = l.Release(ctx)
}

func TestLockStaleHolderNeedsStealAndVictimNotices(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	// A run that died: its lease was last renewed a minute ago.
	old := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	_, err := c.Client.CoordinationV1().Leases(ns).Create(ctx, &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "rollbook-test", Namespace: ns,
			Annotations: map[string]string{annHolderUser: "bob", annHolderHost: "ci", annHolderPID: "7", annHolderRun: "dead"}},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To("bob@ci/7/dead"), LeaseDurationSeconds: ptr.To(int32(30)),
			AcquireTime: &old, RenewTime: &old},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	me := Holder{User: "alice", Host: "laptop", PID: 1, RunID: "new"}
	_, err = Acquire(ctx, c.Client, ns, "rollbook-test", me, LockOptions{})
	var le *LockedError
	if !errors.As(err, &le) || !le.Stale || !strings.Contains(err.Error(), "--steal-lock") {
		t.Fatalf("stale lease without --steal-lock: %v", err)
	}
	l, err := Acquire(ctx, c.Client, ns, "rollbook-test", me, LockOptions{Steal: true, Duration: 3 * time.Second})
	if err != nil {
		t.Fatalf("steal a stale lease: %v", err)
	}
	// Someone steals it from us in turn (we look dead to them): our renewal
	// hits a conflict and Lost fires, so the run stops acting.
	lease, _ := c.Client.CoordinationV1().Leases(ns).Get(ctx, "rollbook-test", metav1.GetOptions{})
	lease.Spec.HolderIdentity = ptr.To("carol@x/9/other")
	if _, err := c.Client.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := l.WithLock(ctx)
	defer cancel()
	select {
	case <-runCtx.Done():
		if !strings.Contains(context.Cause(runCtx).Error(), "lost lease") {
			t.Fatalf("cause: %v", context.Cause(runCtx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("losing the lease did not stop the run")
	}
}

func TestRedactArgs(t *testing.T) {
	got := strings.Join(RedactArgs([]string{"kubectl-tt", "--token", "s3cret", "--token=abc", "--context", "prod", "--password=pw"}), " ")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "abc") || strings.Contains(got, "pw") || !strings.Contains(got, "--context prod") {
		t.Fatalf("redacted: %s", got)
	}
}
