package tthost

import (
	"context"
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
}

// HostEvents reports every unsafe tool call recorded on a simulated host.
type HostEvents struct {
	Hosts  *Hosts
	Report Reporter
	// Every is the poll interval; default 250ms.
	Every time.Duration
	seen  map[string]int
}

// Run polls until ctx is done.
func (e *HostEvents) Run(ctx context.Context) error {
	if e.Every <= 0 {
		e.Every = 250 * time.Millisecond
	}
	for {
		e.Poll()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.Every):
		}
	}
}

// Poll reports the events recorded since the last poll.
func (e *HostEvents) Poll() {
	if e.seen == nil {
		e.seen = map[string]int{}
	}
	for _, node := range e.Hosts.Nodes() {
		root, _ := e.Hosts.Root(node)
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
}
