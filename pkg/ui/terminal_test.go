package ui

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/internal/ptytest"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// On a 60-column terminal nothing rollbook draws passes the edge: the
// status line with six long-named nodes waiting, step lines, mutation
// lines with long messages; names are cut in the middle, not wrapped, so
// rows stay aligned; the tally (k of N, ETA) leads the status line.
func TestProgressFitsANarrowTerminal(t *testing.T) {
	term, err := ptytest.Open(60, 24)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	p := newProgress(term.Tty, true, time.Hour)
	p.SetRun(6, func() string { return "2 of 6 done · ETA 41m · 5.9 nodes/h" })
	started := time.Now().Add(-time.Minute)
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		name := "node/gke-production-tenstorrent-pool-1-4f3a9c2e-" + n
		p.Step(name, runbook.StepResult{Title: "Drain the node", Status: runbook.StepWaiting, Started: &started, Budget: 10 * time.Minute})
		p.Record(context.Background(), corev1.ObjectReference{Kind: "Node", Name: name[5:]}, false, "Cordoned",
			"cordoned by rollbook tt-kmd run 20261206-050000-abcdef so that its pods can be drained before the module swap")
	}
	p.redraw(0)
	p.redraw(1)
	p.Close()
	out := term.Close()
	lines := ptytest.Lines(out)
	var status, headers []string
	for _, l := range lines {
		if c := ptytest.Columns(l); c > 60 {
			t.Errorf("a line of %d columns on a 60-column terminal: %q", c, l)
		}
		if strings.HasPrefix(l, "⠋") || strings.HasPrefix(l, "⠙") {
			status = append(status, l)
		}
		if strings.HasPrefix(l, "node/") {
			headers = append(headers, l)
		}
	}
	if len(status) != 2 || !strings.Contains(status[0], "2 of 6 done · ETA 41m") || !strings.HasSuffix(status[0], "…") {
		t.Errorf("status lines %q: want two, the tally first, cut with …", status)
	}
	if len(headers) != 6 || !strings.Contains(headers[2], "(3 of 6)") {
		t.Errorf("target headers %q: want one per node, numbered k of 6", headers)
	}
	// Every step row puts the title at the same column.
	col := -1
	for _, l := range lines {
		if i := strings.Index(l, "Drain the node"); i >= 0 && strings.HasPrefix(l, "…") {
			if c := len([]rune(l[:i])); col < 0 {
				col = c
			} else if c != col {
				t.Errorf("title at column %d, earlier rows at %d: %q", c, col, l)
			}
			if !strings.Contains(l, "gke-produc…f3a9c2e-") {
				t.Errorf("long node name not cut in the middle: %q", l)
			}
		}
	}
	if col < 0 {
		t.Error("no step row")
	}
	t.Logf("terminal output:\n%s", strings.Join(lines, "\n"))
}

// Colours follow the writer they print to: progress on a terminal's stderr
// keeps them while stdout (here the test's pipe) goes elsewhere; a buffer
// gets none.
func TestStyleBoundToItsWriter(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	term, err := ptytest.Open(80, 24)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer term.Close()
	if got := NewStyle(term.Tty).OK("done"); !strings.Contains(got, "\x1b[") {
		t.Errorf("no colour on a terminal while stdout is not one: %q", got)
	}
	if got := NewStyle(&bytes.Buffer{}).OK("done"); got != "done" {
		t.Errorf("colour into a buffer: %q", got)
	}
}

func TestFitAndShortName(t *testing.T) {
	if got := ShortName("gke-production-pool-1-4f3a9c2e-x7k2", 20); len([]rune(got)) != 20 || !strings.HasSuffix(got, "-x7k2") {
		t.Errorf("ShortName = %q", got)
	}
	if got := ShortName("n1", 20); got != "n1" {
		t.Errorf("ShortName of a short name = %q", got)
	}
	s := strings.Repeat("word ", 40)
	for _, l := range strings.Split(Fit(s, 30, 4), "\n") {
		if len(l) > 30 {
			t.Errorf("Fit left %d columns: %q", len(l), l)
		}
	}
	if Fit(s, 0, 4) != s {
		t.Error("Fit without a width changed the text")
	}
}
