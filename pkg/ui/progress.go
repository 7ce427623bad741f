package ui

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

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
	p := &Progress{w: w, style: NewStyle(w), tty: tty, now: time.Now, waiting: map[string]waitInfo{}, heartbeat: heartbeat}
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

// Printf prints one line, above the status line.
func (p *Progress) Printf(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	fmt.Fprintf(p.w, format+"\n", a...)
}

// Step implements runbook.Reporter.
func (p *Progress) Step(target string, s runbook.StepResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	delete(p.waiting, target)
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
	case runbook.StepBlocked:
		mark, detail = st.Bad("■"), "blocked: "+s.Error
	case runbook.StepFailed:
		mark, detail = st.Bad("✗"), "failed: "+s.Error
	case runbook.StepInterrupted:
		mark, detail = st.Warn("‖"), "interrupted: "+s.Error
	}
	fmt.Fprintf(p.w, "%s %-14s %-34s %s\n", mark, shortTarget(target), s.Title, indentRest(detail, 52))
	for _, c := range s.Changes {
		fmt.Fprintf(p.w, "      %s %s %s %s\n", st.Dim("would"), c.Action, c.Object, st.Dim(c.Detail))
	}
}

// TargetDone implements runbook.Reporter.
func (p *Progress) TargetDone(r runbook.TargetResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	delete(p.waiting, r.Target)
	for _, n := range r.Notes {
		fmt.Fprintf(p.w, "  %s %s\n", p.style.Warn("!"), n)
	}
	if r.Error != "" {
		fmt.Fprintf(p.w, "%s %s: %s\n", p.style.Bad("✗"), r.Target, r.Error)
	}
}

// Record implements kube.Recorder's printing half: one line per mutation.
func (p *Progress) Record(_ context.Context, obj corev1.ObjectReference, warning bool, reason, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
	mark := p.style.Act("  ▸")
	if warning {
		mark = p.style.Warn("  ▲")
	}
	name := strings.ToLower(obj.Kind) + "/" + obj.Name
	if obj.Namespace != "" {
		name = strings.ToLower(obj.Kind) + "/" + obj.Namespace + "/" + obj.Name
	}
	fmt.Fprintf(p.w, "%s %s %s: %s\n", mark, p.style.Bold(reason), name, message)
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
			fmt.Fprintf(p.w, "%s still waiting: %s\n", p.now().UTC().Format("15:04:05"), p.statusText())
		}
		p.mu.Unlock()
	}
}

func (p *Progress) spin(stop <-chan struct{}) {
	defer close(p.stopped)
	frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
	t := time.NewTicker(120 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if len(p.waiting) > 0 {
			p.clearStatus()
			fmt.Fprintf(p.w, "%s %s", p.style.Act(frames[i%len(frames)]), p.statusText())
			p.status = true
		}
		p.mu.Unlock()
	}
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
		s := fmt.Sprintf("%s: %s %s", shortTarget(t), w.title, el)
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

// indentRest keeps continuation lines of a multi-line detail aligned.
func indentRest(s string, col int) string {
	return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", col))
}
