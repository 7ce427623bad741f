package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rollbook/rollbook/pkg/notify"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
	"github.com/rollbook/rollbook/pkg/window"
)

// memRoll is a fleet of in-memory nodes, each cordoned, worked on for
// work, then uncordoned: a node is "" (untouched), "cordoned" (half-way)
// or "done".
type memRoll struct {
	mu     sync.Mutex
	state  map[string]string
	starts []time.Time // when each node was cordoned
}

func (m *memRoll) get(n string) string { m.mu.Lock(); defer m.mu.Unlock(); return m.state[n] }
func (m *memRoll) set(n, v string)     { m.mu.Lock(); defer m.mu.Unlock(); m.state[n] = v }

func (m *memRoll) runbook(work time.Duration) *runbook.Runbook[string] {
	type f = string
	return &runbook.Runbook[f]{
		Name:    "mem",
		Observe: func(_ context.Context, t runbook.Target) (f, error) { return t.Name() + "=" + m.get(t.Name()), nil },
		Steps: []runbook.Step[f]{
			{ID: "cordon", Title: "Cordon", Done: func(s f) (bool, string) { return !strings.HasSuffix(s, "="), "" },
				Act: func(_ context.Context, s f) error {
					m.mu.Lock()
					m.starts = append(m.starts, time.Now())
					m.mu.Unlock()
					m.set(strings.TrimSuffix(s, "="), "cordoned")
					return nil
				}},
			{ID: "work", Title: "Work and uncordon", Done: func(s f) (bool, string) { return strings.HasSuffix(s, "=done"), "" },
				Act: func(_ context.Context, s f) error {
					time.Sleep(work)
					m.set(strings.TrimSuffix(s, "=cordoned"), "done")
					return nil
				}},
		},
	}
}

// A window that closes mid-roll stops new nodes at its end: the nodes in
// progress then finish, none is left half-way, and the run ends paused
// saying when the window opens again and the command to run then.
func TestWindowClosingMidRollPausesWithNoNodeHalfWay(t *testing.T) {
	for _, parallel := range []int{1, 3} {
		t.Run(fmt.Sprint("parallel ", parallel), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble's clock starts Saturday 2000-01-01 00:00 UTC.
				defer func(c func() time.Time) { scheduleClock = c }(scheduleClock)
				scheduleClock = time.Now
				w, err := window.Parse("Sat,Sun 00:00-00:10 UTC")
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				s := &Session{plugin: "tt", Progress: ui.NewProgress(&out)}
				defer s.Progress.Close()
				m := &memRoll{state: map[string]string{}}
				var targets []runbook.Target
				for i := range 20 {
					targets = append(targets, runbook.ScopeTarget{Scope: fmt.Sprintf("n%02d", i)})
				}
				o := runbook.Options{Parallel: parallel, Paused: func(context.Context) (bool, string) { return false, "" }}
				s.applySchedule(&o, window.Schedule{Window: w}, false)
				res := runbook.Run(context.Background(), m.runbook(3*time.Minute), targets, o)

				if res.Outcome != runbook.OutcomePaused {
					t.Fatalf("outcome %s, want paused", res.Outcome)
				}
				done := 0
				for _, tr := range res.Targets {
					switch st := m.get(tr.Target); {
					case st == "done" && tr.Outcome == runbook.OutcomeDone:
						done++
					case st == "" && tr.Outcome == runbook.OutcomePaused:
						if !strings.Contains(tr.Error, "opens Sun 2000-01-02 00:00 UTC") {
							t.Errorf("%s: %q does not say when the window opens", tr.Target, tr.Error)
						}
					default:
						t.Errorf("%s left %q with outcome %s: half-way", tr.Target, st, tr.Outcome)
					}
				}
				// Nodes start at 0, 3, 6 and 9 minutes (by parallel slots):
				// 4 batches start inside the window, none after it.
				if want := 4 * parallel; done != want {
					t.Errorf("%d nodes done, want %d (every one started before 00:10)", done, want)
				}
				if time.Now().After(time.Date(2000, 1, 1, 0, 12, 0, 0, time.UTC)) {
					t.Errorf("run ended at %s: it must not wait past the last node in flight", time.Now())
				}
				if !strings.Contains(s.scheduleWhy, "re-run then: kubectl tt") {
					t.Errorf("the pause names no command to re-run: %q", s.scheduleWhy)
				}
			})
		})
	}
}

// --stop-at stops as the window does, and a pause on the Lease (asked
// first) still wins.
func TestStopAtAndLeasePause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func(c func() time.Time) { scheduleClock = c }(scheduleClock)
		scheduleClock = time.Now
		var out bytes.Buffer
		s := &Session{plugin: "ate", Progress: ui.NewProgress(&out)}
		defer s.Progress.Close()
		m := &memRoll{state: map[string]string{}}
		targets := []runbook.Target{runbook.ScopeTarget{Scope: "a"}, runbook.ScopeTarget{Scope: "b"}, runbook.ScopeTarget{Scope: "c"}}
		o := runbook.Options{Paused: func(context.Context) (bool, string) { return false, "" }}
		s.applySchedule(&o, window.Schedule{StopAt: time.Now().Add(4 * time.Minute)}, false)
		res := runbook.Run(context.Background(), m.runbook(3*time.Minute), targets, o)
		if res.Outcome != runbook.OutcomePaused || m.get("a") != "done" || m.get("b") != "done" || m.get("c") != "" {
			t.Fatalf("want a and b done (started at 0 and 3 min), c untouched: %s %v", res.Outcome, m.state)
		}
		if !strings.Contains(res.Targets[2].Error, "--stop-at") || !strings.Contains(s.scheduleWhy, "re-run without it") {
			t.Errorf("why: %q / %q", res.Targets[2].Error, s.scheduleWhy)
		}

		m2 := &memRoll{state: map[string]string{}}
		o = runbook.Options{Paused: func(context.Context) (bool, string) { return true, "paused by someone" }}
		s2 := &Session{plugin: "ate", Progress: s.Progress}
		s2.applySchedule(&o, window.Schedule{StopAt: time.Now().Add(time.Hour)}, false)
		res = runbook.Run(context.Background(), m2.runbook(time.Minute), targets, o)
		if res.Outcome != runbook.OutcomePaused || res.Targets[0].Error != "paused by someone" || m2.get("a") != "" {
			t.Fatalf("a Lease pause must stop the roll as before: %+v", res.Targets[0])
		}
	})
}

// With --wait-for-window (an in-cluster run's default) the run waits
// out the closed window and goes on in the next: every node is done, and
// every one started inside a window. A pause set while it waits ends the
// wait within scheduleRecheck.
func TestWaitForWindowStartsEveryNodeInsideAWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func(c func() time.Time) { scheduleClock = c }(scheduleClock)
		scheduleClock = time.Now
		w, err := window.Parse("Sat,Sun 00:00-00:10 UTC") // the bubble starts Saturday 00:00 UTC
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		var kinds []string
		s := &Session{plugin: "tt", Progress: ui.NewProgress(&out),
			notifier: notify.NewFunc(func(e notify.Event) error { kinds = append(kinds, e.Kind); return nil }, nil)}
		defer s.Progress.Close()
		m := &memRoll{state: map[string]string{}}
		var targets []runbook.Target
		for i := range 6 {
			targets = append(targets, runbook.ScopeTarget{Scope: fmt.Sprintf("n%d", i)})
		}
		o := runbook.Options{Paused: func(context.Context) (bool, string) { return false, "" }}
		s.applySchedule(&o, window.Schedule{Window: w}, true)
		res := runbook.Run(context.Background(), m.runbook(3*time.Minute), targets, o)
		if res.Outcome != runbook.OutcomeDone || len(m.starts) != 6 {
			t.Fatalf("outcome %s, %d nodes started; want all 6 done", res.Outcome, len(m.starts))
		}
		for i, st := range m.starts {
			if !w.Open(st) {
				t.Errorf("node %d started at %s, outside the window", i, st)
			}
		}
		if !strings.Contains(out.String(), "waiting until it opens Sun 2000-01-02 00:00 UTC") {
			t.Errorf("the run does not say it waits:\n%s", out.String())
		}
		if err := s.notifier.Close(context.Background()); err != nil || strings.Join(kinds, ",") != "paused,resumed" {
			t.Errorf("notified %v (%v), want paused as it waits and resumed as the window opens", kinds, err)
		}
		s.notifier = nil

		// A pause while waiting: the wait ends paused within a recheck.
		var mu sync.Mutex
		pausedNow := false
		o = runbook.Options{Paused: func(context.Context) (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return pausedNow, "paused by someone"
		}}
		s.applySchedule(&o, window.Schedule{Window: w}, true)
		time.Sleep(10 * time.Minute) // the roll ended Sunday 00:06; now closed until Saturday
		start := time.Now()
		go func() {
			time.Sleep(time.Hour)
			mu.Lock()
			pausedNow = true
			mu.Unlock()
		}()
		m2 := &memRoll{state: map[string]string{}}
		res = runbook.Run(context.Background(), m2.runbook(time.Minute), targets[:1], o)
		if res.Outcome != runbook.OutcomePaused || len(m2.starts) != 0 || time.Since(start) > time.Hour+scheduleRecheck {
			t.Errorf("a pause during the wait: %s after %s, %d started", res.Outcome, time.Since(start), len(m2.starts))
		}
	})
}

func TestResumeCommand(t *testing.T) {
	args := []string{"upgrade", "kmd", "--version", "2.8.0", "--window", "Mon-Fri 01:00-05:00 Europe/Berlin",
		"--stop-at", "2026-03-02T05:00:00Z", "--token=abc", "--notes=it's"}
	got := ResumeCommand("tt", args, false)
	want := `kubectl tt upgrade kmd --version 2.8.0 --window 'Mon-Fri 01:00-05:00 Europe/Berlin' --stop-at ` +
		`2026-03-02T05:00:00Z --token=REDACTED '--notes=it'\''s'`
	if got != want {
		t.Errorf("ResumeCommand =\n %s\nwant\n %s", got, want)
	}
	if got := ResumeCommand("tt", append(args, "--stop-at=4h"), true); strings.Contains(got, "stop-at") {
		t.Errorf("--stop-at kept: %s", got)
	}
}
