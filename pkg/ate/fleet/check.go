package fleet

import (
	"strings"
)

// Check is one item of the runbook's "confirm before you begin" list.
type Check struct {
	Group   string `json:"group"`
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Warning bool   `json:"warning,omitempty"` // not a blocker, but read it
	Detail  string `json:"detail,omitempty"`
	Fix     string `json:"fix,omitempty"`
}

// OrNone is s, or "<none>" when it is empty.
func OrNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// FailedChecks describes the failed blocking checks, one per line, each
// with its fix.
func FailedChecks(checks []Check) string {
	var lines []string
	for _, c := range checks {
		if c.OK || c.Warning {
			continue
		}
		l := "✗ " + c.Name
		if c.Detail != "" {
			l += ": " + c.Detail
		}
		if c.Fix != "" {
			l += "\n    → " + c.Fix
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}
