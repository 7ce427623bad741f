package simtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// violationsFile is where the sim's invariant monitor appends one JSON line
// per safety violation it sees (see sim/monitor). It is read as text here:
// the main module does not import the sim module.
const violationsFile = "violations"

// Violations returns the raw violation lines the sim recorded so far.
func (c *Cluster) Violations() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, violationsFile))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			out = append(out, string(l))
		}
	}
	return out, nil
}

// lateGrace is the longest the sim's monitor waits before it records a
// violation (a worker next to another atelet's version must last 15 s).
const lateGrace = 16 * time.Second

// checkLate runs after every test of the package: a violation that the
// monitor recorded after the last test read the file (within its grace)
// fails the package, so nothing slips between tests.
func (c *Cluster) checkLate() error {
	c.mu.Lock()
	watched, seen := c.watched, c.seen
	c.mu.Unlock()
	if !watched {
		return nil
	}
	time.Sleep(lateGrace)
	all, err := c.Violations()
	if err != nil {
		return err
	}
	if len(all) > seen {
		return fmt.Errorf("the sim recorded %d violation(s) after the last test ended:\n%s",
			len(all)-seen, strings.Join(all[seen:], "\n"))
	}
	return nil
}

func (c *Cluster) markSeen(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched = true
	c.seen = max(c.seen, n)
}

// ExpectNoViolations makes t fail at its end if the sim recorded a safety
// violation while t ran. Call it first thing in every e2e test.
func (c *Cluster) ExpectNoViolations(t testing.TB) {
	t.Helper()
	if _, err := c.Violations(); err != nil {
		t.Fatalf("simtest: read violations: %v (does this sim have the invariant monitor?)", err)
	}
	// Everything since the last check counts: a violation that surfaced
	// between two tests (the monitor waits out a grace) is not lost.
	c.mu.Lock()
	before := make([]string, c.seen)
	c.mu.Unlock()
	t.Cleanup(func() {
		after, err := c.Violations()
		if err != nil {
			t.Errorf("simtest: read violations: %v", err)
			return
		}
		c.markSeen(len(after))
		for _, v := range after[len(before):] {
			t.Errorf("sim invariant violated: %s", v)
		}
	})
}

// ExpectViolation returns a check, to be called at the test's end, that the
// sim recorded at least one violation of rule while the test ran: the proof
// that the sim produces the situation a guard protects against.
func (c *Cluster) ExpectViolation(t testing.TB, rule string) func() {
	t.Helper()
	before, err := c.Violations()
	if err != nil {
		t.Fatalf("simtest: read violations: %v", err)
	}
	return func() {
		t.Helper()
		after, _ := c.Violations()
		c.markSeen(len(after))
		for _, v := range after[len(before):] {
			if bytes.Contains([]byte(v), []byte(`"rule":"`+rule+`"`)) {
				return
			}
		}
		t.Errorf("expected the sim to record a %q violation; it recorded none", rule)
	}
}
