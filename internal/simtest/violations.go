package simtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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

// ExpectNoViolations makes t fail at its end if the sim recorded a safety
// violation while t ran. Call it first thing in every e2e test.
func (c *Cluster) ExpectNoViolations(t testing.TB) {
	t.Helper()
	before, err := c.Violations()
	if err != nil {
		t.Fatalf("simtest: read violations: %v (does this sim have the invariant monitor?)", err)
	}
	t.Cleanup(func() {
		after, err := c.Violations()
		if err != nil {
			t.Errorf("simtest: read violations: %v", err)
			return
		}
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
		for _, v := range after[len(before):] {
			if bytes.Contains([]byte(v), []byte(`"rule":"`+rule+`"`)) {
				return
			}
		}
		t.Errorf("expected the sim to record a %q violation; it recorded none", rule)
	}
}
