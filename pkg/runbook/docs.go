package runbook

import (
	"fmt"
	"strings"
)

// Markdown renders the runbook as the reference page checked in under
// runbooks/: every step with its ID, what it does, how it is observed and
// what guards it.
func (rb *Runbook[F]) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Generated from the step registry by `make docs`; do not edit. -->\n\n")
	fmt.Fprintf(&b, "# %s\n\n", rb.Title)
	fmt.Fprintf(&b, "Runbook `%s`.\n\n%s\n\n", rb.Name, strings.TrimSpace(rb.Doc))
	fmt.Fprintf(&b, "| # | step | ID | timeout |\n|---|---|---|---|\n")
	for i, s := range rb.Steps {
		to := "—"
		if s.Timeout > 0 {
			to = s.Timeout.String()
		}
		fmt.Fprintf(&b, "| %d | %s | `%s` | %s |\n", i+1, s.Title, s.ID, to)
	}
	for i, s := range rb.Steps {
		fmt.Fprintf(&b, "\n## %d. %s\n\n`%s`\n\n%s\n", i+1, s.Title, s.ID, strings.TrimSpace(s.Doc))
		if len(s.Guards) > 0 {
			b.WriteString("\nGuards (must hold before it acts):\n\n")
			for _, g := range s.Guards {
				fmt.Fprintf(&b, "- %s\n", g.Name)
			}
		}
	}
	return b.String()
}
