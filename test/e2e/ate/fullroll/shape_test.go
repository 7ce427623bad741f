//go:build e2e

package fullroll

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// What every command that changes the cluster shares (one session: lock,
// --dry-run, -o), checked on the commands that are not the roll itself.

// expectLocked holds the roll's Lease as another run would and asserts that
// args exit 4 naming that run; unchanged must then still hold.
func expectLocked(t *testing.T, ctx context.Context, unchanged func() bool, args ...string) {
	t.Helper()
	c := simtest.Get(t)
	other := lease.CurrentHolder(ctx, c.Client, cli.NewRunID())
	lock, err := lease.Acquire(ctx, c.Client, fleet.Namespace, fleet.LockName, other, lease.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, code := atetest.Run(t, ctx, args...)
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code != cli.ExitLocked || !strings.Contains(out, other.RunID) {
		t.Fatalf("%v while another run holds the lock: exit %d, want %d naming run %s", args, code, cli.ExitLocked, other.RunID)
	}
	if !unchanged() {
		t.Fatalf("%v changed the cluster while another run held the lock", args)
	}
}

// result decodes the first -o json document of out.
func result(t *testing.T, out string) runbook.Result {
	t.Helper()
	var r runbook.Result
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&r); err != nil {
		t.Fatalf("-o json: %v", err)
	}
	return r
}

// eventsFor counts the Events in ns (every namespace when "") of reason
// about objects named name (any name when ""), whose message contains text.
func eventsFor(t *testing.T, ctx context.Context, ns, reason, name, text string) int {
	t.Helper()
	sel := "reason=" + reason
	if name != "" {
		sel += ",involvedObject.name=" + name
	}
	evs, err := simtest.Get(t).Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if strings.Contains(e.Message, text) {
			n++
		}
	}
	return n
}

// interruptAt runs args once per reason, each cancelled right after the
// first Event of that reason; a run may also finish first. The next run
// must resume.
func interruptAt(t *testing.T, ctx context.Context, args []string, reasons ...string) {
	t.Helper()
	for _, reason := range reasons {
		runCtx, cancel := cancelOnEvent(t, ctx, reason)
		_, code := atetest.Run(t, runCtx, args...)
		cancel()
		if code != 0 && code != cli.ExitFailed {
			t.Fatalf("%v interrupted at %s: exit %d", args, reason, code)
		}
	}
}
