package ui

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/ansi"
	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// Progress prints a run as it happens: one line per step transition and per
// mutation, and on a terminal a redrawn status line for waits.
type Progress struct {
	w     io.Writer
	style Style
	tty   bool
	now   func() time.Time

	mu      sync.Mutex
	waiting map[string]waitInfo // target → what it waits for
	status  bool                // a status line is on screen
	// started numbers the targets in the order they start (k of N).
	started map[string]int
	total   int           // N; 0 when not known up front
	tally   func() string // the run's count, ETA and rate ("" until set)
	stop    chan struct{}
	stopped chan struct{}
	// heartbeat is how often, without a terminal, a line says what the run
	// still waits for; a log or CI job then never looks hung.
	heartbeat time.Duration
}

// HeartbeatEvery is the longest a non-terminal run stays silent while it waits.
const HeartbeatEvery = 30 * time.Second

type waitInfo struct {
	title   string
	started time.Time
	budget  time.Duration
}

// NewProgress writes progress to w.
func NewProgress(w io.Writer) *Progress {
	return newProgress(w, IsTerminal(w), HeartbeatEvery)
}

func newProgress(w io.Writer, tty bool, heartbeat time.Duration) *Progress {
	p := &Progress{w: w, style: NewStyle(w), tty: tty, now: time.Now, waiting: map[string]waitInfo{}, heartbeat: heartbeat,
		started: map[string]int{}}
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	if p.tty {
		go p.spin(p.stop)
	} else {
		go p.beat(p.stop)
	}
	return p
}

// Close stops the status line.
func (p *Progress) Close() {
	p.mu.Lock()
	closed := p.stop == nil
	stop := p.stop
	p.stop = nil
	p.mu.Unlock()
	if closed {
		return
	}
	close(stop)
	<-p.stopped
	p.mu.Lock()
	p.clearStatus()
	p.mu.Unlock()
}

// SetRun tells the progress how many targets the run has (0: not known up
// front) and how to say how far it is: tally returns the count, ETA and rate
// ("2 of 6 done · ETA 41m · 5.9 nodes/h") that leads the status line and the
// heartbeat and follows each finished target. It must not call back into p.
func (p *Progress) SetRun(total int, tally func() string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total, p.tally = total, tally
}

// Printf prints one line, above the status line.
func (p *Progress) Printf(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	p.line(fmt.Sprintf(format, a...), 2)
}

// line prints s (one or more lines) bounded to the terminal's width, its
// continuation lines indented by indent columns.
func (p *Progress) line(s string, indent int) {
	if p.tty {
		s = Fit(s, Width(p.w), indent)
	}
	fmt.Fprintln(p.w, s)
}

// nameWidth is the target column: wide enough for most node names, cut in
// the middle past it (ShortName) so long cloud names keep rows aligned.
const nameWidth = 20

// Step implements runbook.Reporter.
func (p *Progress) Step(target string, s runbook.StepResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	delete(p.waiting, target)
	p.header(target)
	st := p.style
	var mark, detail string
	switch s.Status {
	case runbook.StepDone:
		mark, detail = st.OK("✓"), st.Dim(s.Evidence)
	case runbook.StepActed:
		mark, detail = st.OK("✓"), s.Evidence
		if s.Duration > 0 {
			detail += st.Dim(fmt.Sprintf(" (%s)", s.Duration.Round(100*time.Millisecond)))
		}
	case runbook.StepActing:
		mark, detail = st.Act("→"), st.Dim(s.Evidence)
	case runbook.StepWaiting:
		started := p.now()
		if s.Started != nil {
			started = *s.Started
		}
		p.waiting[target] = waitInfo{title: s.Title, started: started, budget: s.Budget}
		mark, detail = st.Act("…"), "waiting"
		if s.Budget > 0 {
			detail += fmt.Sprintf(" (budget %s)", s.Budget)
		}
	case runbook.StepWouldAct:
		mark, detail = st.Warn("○"), "would act: "+s.Evidence
	case runbook.StepPending:
		mark, detail = st.Dim("·"), st.Dim("then")
		if s.Error != "" { // the run stopped before this step began
			mark, detail = st.Warn("·"), "not started: "+s.Error
		}
	case runbook.StepBlocked:
		mark, detail = st.Bad("■"), "blocked: "+s.Error
	case runbook.StepFailed:
		mark, detail = st.Bad("✗"), "failed: "+s.Error
	case runbook.StepInterrupted:
		mark, detail = st.Warn("‖"), "interrupted: "+s.Error
	}
	head := fmt.Sprintf("%s %-*s %-34s", mark, nameWidth, ShortName(shortTarget(target), nameWidth), s.Title)
	if width := Width(p.w); p.tty && width > 0 && ansiWidth(head)+1+ansiWidth(firstLine(detail)) > width {
		// A narrow terminal: the detail goes under the step, not past its edge.
		p.line(strings.TrimRight(head, " "), 4)
		p.line("    "+indentRest(detail, 4), 4)
	} else {
		p.line(head+" "+indentRest(detail, 4+nameWidth+34), 4)
	}
	for _, c := range s.Changes {
		p.line(fmt.Sprintf("      %s %s %s %s", st.Dim("would"), c.Action, c.Object, st.Dim(c.Detail)), 8)
	}
}

// header prints, as a target reports its first step, which one of the run
// it is: "node/n3 (3 of 6)".
func (p *Progress) header(target string) {
	if _, ok := p.started[target]; ok {
		return
	}
	k := len(p.started) + 1
	p.started[target] = k
	of := fmt.Sprintf("%d", k)
	if p.total > 0 {
		of = fmt.Sprintf("%d of %d", k, p.total)
	}
	if p.total == 1 && k == 1 {
		return // one target: nothing to count
	}
	p.line(p.style.Bold(fmt.Sprintf("%s (%s)", target, of)), 2)
}

// TargetDone implements runbook.Reporter.
func (p *Progress) TargetDone(r runbook.TargetResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	delete(p.waiting, r.Target)
	for _, n := range r.Notes {
		p.line(fmt.Sprintf("  %s %s", p.style.Warn("!"), n), 4)
	}
	if r.Error != "" {
		p.line(fmt.Sprintf("%s %s: %s", p.style.Bad("✗"), r.Target, r.Error), 4)
	}
	if t := p.tallyText(); t != "" && p.total != 1 {
		p.line(p.style.Dim("  "+t), 4)
	}
}

func (p *Progress) tallyText() string {
	if p.tally == nil {
		return ""
	}
	return p.tally()
}

// Record implements kube.Recorder's printing half: one line per mutation.
func (p *Progress) Record(_ context.Context, obj corev1.ObjectReference, warning bool, reason, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	mark := "  " + p.style.Act("▸")
	if warning {
		mark = "  " + p.style.Warn("▲")
	}
	name := strings.ToLower(obj.Kind) + "/" + obj.Name
	if obj.Namespace != "" {
		name = strings.ToLower(obj.Kind) + "/" + obj.Namespace + "/" + obj.Name
	}
	p.line(fmt.Sprintf("%s %s %s: %s", mark, p.style.Bold(reason), name, message), 6)
}

// beat prints, off a terminal, one line per heartbeat while anything waits:
// what is awaited, for how long, and the budget left.
func (p *Progress) beat(stop <-chan struct{}) {
	defer close(p.stopped)
	t := time.NewTicker(p.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if len(p.waiting) > 0 {
			line := p.now().UTC().Format("15:04:05")
			if t := p.tallyText(); t != "" {
				line += " " + t + ";"
			}
			fmt.Fprintf(p.w, "%s still waiting: %s\n", line, p.statusText())
		}
		p.mu.Unlock()
	}
}

func (p *Progress) spin(stop <-chan struct{}) {
	defer close(p.stopped)
	t := time.NewTicker(120 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.redraw(i)
	}
}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// redraw draws the status line (frame i of the spinner) while anything
// waits: the run's tally, then each wait, cut to the terminal's width.
func (p *Progress) redraw(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiting) == 0 {
		return
	}
	p.clearStatus()
	text := p.statusText()
	if t := p.tallyText(); t != "" {
		text = t + " │ " + text
	}
	// One column short of the edge: a full line would move the cursor
	// on, and the next redraw would leave it behind.
	fmt.Fprintf(p.w, "%s %s", p.style.Act(spinner[i%len(spinner)]), Truncate(text, Width(p.w)-3))
	p.status = true
}

func (p *Progress) statusText() string {
	targets := make([]string, 0, len(p.waiting))
	for t := range p.waiting {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	var parts []string
	for _, t := range targets {
		w := p.waiting[t]
		el := p.now().Sub(w.started).Round(time.Second)
		s := fmt.Sprintf("%s: %s %s", ShortName(shortTarget(t), nameWidth), w.title, el)
		if w.budget > 0 {
			s += fmt.Sprintf(" of %s (%s left)", w.budget, max(0, w.budget-p.now().Sub(w.started)).Round(time.Second))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " · ")
}

func (p *Progress) clearStatus() {
	if p.status {
		fmt.Fprint(p.w, "\r\033[K")
		p.status = false
	}
}

func shortTarget(t string) string { return strings.TrimPrefix(t, "node/") }

func ansiWidth(s string) int { return ansi.StringWidth(s) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// indentRest keeps continuation lines of a multi-line detail aligned.
func indentRest(s string, col int) string {
	return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", col))
}
