// Package monitor is the sim's safety oracle. Simulated peers and watchers
// report every safety violation they see; each is appended as one JSON line
// to DIR/violations, which every e2e test asserts is empty at its end.
//
// The monitor decides what is unsafe from the sim's own model of hosts and
// the substrate, never from rollbook's predicates: a wrong predicate in a
// plugin must show up here as a violation, not as agreement. The rules that
// Kubernetes objects alone decide are watched by package kubewatch, which
// `sim up` starts for every scenario; the simulated peers report the rest.
package monitor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File is the name of the violations file inside the sim's directory.
const File = "violations"

// Rules the sim checks. Their names are stable: tests and docs refer to them.
const (
	RuleVersionSkew      = "worker-next-to-other-atelet" // a worker pod Running next to an atelet of another version
	RuleActorLost        = "actor-lost"                  // an actor CRASHED, or gone with its state
	RuleOldPodBeforeFlip = "old-pool-pod-deleted-before-flip"
	RuleServingPoolEdit  = "serving-pool-edited" // a serving pool's spec changed or scaled down
	RuleTooManyOut       = "too-many-nodes-out-of-service"
	RuleRmmodUnderHolder = "rmmod-under-holder"
	RuleFlashUnderHolder = "flash-under-holder"
	RuleFlashInterrupted = "flash-interrupted" // a chip's SPI write cut short (a helper killed mid-flash)
	// RuleFailedSPITouched: a board tt-flash said needs a person (a failed
	// SPI write: do not reset or power off) was reset or flashed again
	// before the person's fix.
	RuleFailedSPITouched = "failed-spi-touched"
	RuleCordonLeft       = "cordon-left-behind" // a node left cordoned by a run that ended without saying so
)

// Violation is one line of the violations file.
type Violation struct {
	Time   time.Time `json:"time"`
	Rule   string    `json:"rule"`
	Object string    `json:"object"`
	Detail string    `json:"detail"`
}

// Monitor appends violations to DIR/violations. A nil *Monitor discards
// them, so packages can be used without one in unit tests.
type Monitor struct {
	mu   sync.Mutex
	path string
	seen map[string]bool
}

// Open creates (or truncates) DIR/violations.
func Open(dir string) (*Monitor, error) {
	p := filepath.Join(dir, File)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return nil, err
	}
	return &Monitor{path: p, seen: map[string]bool{}}, nil
}

// Report records a violation of rule by object. The same rule and object
// with the same detail is recorded once.
func (m *Monitor) Report(rule, object, detail string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := rule + "\x00" + object + "\x00" + detail
	if m.seen[key] {
		return
	}
	m.seen[key] = true
	m.write(rule, object, detail)
}

// ReportEach records a violation every time it is called: for callers that
// decide themselves when a violation is a new one (an episode that ended
// and came back is a second violation, even with the same words).
func (m *Monitor) ReportEach(rule, object, detail string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.write(rule, object, detail)
}

// write appends one line; m.mu is held.
func (m *Monitor) write(rule, object, detail string) {
	b, _ := json.Marshal(Violation{Time: time.Now().UTC(), Rule: rule, Object: object, Detail: detail})
	f, err := os.OpenFile(m.path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "monitor: cannot record %s %s: %v\n", rule, object, err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

// Read returns the violations recorded in dir.
func Read(dir string) ([]Violation, error) {
	f, err := os.Open(filepath.Join(dir, File))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Violation
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var v Violation
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return out, fmt.Errorf("%s: malformed line %q: %w", File, sc.Text(), err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
