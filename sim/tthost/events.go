package tthost

import (
	"context"
	"sync"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/sim/monitor"
)

// Reporter records a safety violation (sim/monitor's Monitor).
type Reporter interface {
	Report(rule, object, detail string)
}

// hostEventRules maps what the fake tools saw on a host to the monitor's
// rules: the tools decide from the host's own process table and refcount.
var hostEventRules = map[string]string{
	fakehost.EventRmmodUnderHolder: monitor.RuleRmmodUnderHolder,
	fakehost.EventFlashUnderHolder: monitor.RuleFlashUnderHolder,
	fakehost.EventFlashInterrupted: monitor.RuleFlashInterrupted,
	fakehost.EventFailedSPITouched: monitor.RuleFailedSPITouched,
}

// HostEvents reports every unsafe tool call recorded on a simulated host.
// Only helpers run the tools that record events, so a host a helper ran on
// (Touch) is read at the next poll, and every host only every FullEvery: at
// 1,000 hosts reading every log four times a second was 3 % of the sim's
// CPU, on the cores the fleet bench measures a roll on.
type HostEvents struct {
	Hosts  *Hosts
	Report Reporter
	// Every is the poll interval for touched hosts; default 250ms.
	Every time.Duration
	// FullEvery is how often every host is read; default 5s.
	FullEvery time.Duration
	seen      map[string]int

	mu      sync.Mutex
	touched map[string]bool
}

// Touch marks node's host to be read at the next poll (a helper started or
// ended there).
func (e *HostEvents) Touch(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.touched == nil {
		e.touched = map[string]bool{}
	}
	e.touched[node] = true
}

// Run polls until ctx is done.
func (e *HostEvents) Run(ctx context.Context) error {
	if e.Every <= 0 {
		e.Every = 250 * time.Millisecond
	}
	if e.FullEvery <= 0 {
		e.FullEvery = 5 * time.Second
	}
	var full time.Time
	for {
		if time.Since(full) >= e.FullEvery {
			full = time.Now()
			e.Poll()
		} else {
			e.pollTouched()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.Every):
		}
	}
}

// Poll reports the events recorded on every host since the last poll.
func (e *HostEvents) Poll() {
	e.mu.Lock()
	e.touched = nil
	e.mu.Unlock()
	for _, node := range e.Hosts.Nodes() {
		e.poll(node)
	}
}

func (e *HostEvents) pollTouched() {
	e.mu.Lock()
	nodes := e.touched
	e.touched = nil
	e.mu.Unlock()
	for node := range nodes {
		e.poll(node)
	}
}

func (e *HostEvents) poll(node string) {
	if e.seen == nil {
		e.seen = map[string]int{}
	}
	root, ok := e.Hosts.Root(node)
	if !ok {
		return
	}
	if err := fakehost.CheckInterruptedFlash(root); err != nil {
		e.Report.Report("sim-host-state-unreadable", "node/"+node, err.Error())
	}
	evs, err := fakehost.Events(root, e.seen[node])
	e.seen[node] += len(evs)
	for _, ev := range evs {
		rule, ok := hostEventRules[ev.Kind]
		if !ok {
			rule = ev.Kind
		}
		e.Report.Report(rule, "node/"+node, ev.Detail)
	}
	if err != nil {
		e.Report.Report("sim-host-events-unreadable", "node/"+node, err.Error())
	}
}
