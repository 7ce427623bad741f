package ui

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// ValidateOutput checks an -o value; text is "".
func ValidateOutput(format string, allowed ...string) error {
	if format == "" {
		return nil
	}
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return fmt.Errorf("--output must be one of %v, not %q", allowed, format)
}

// PrintObject writes v as JSON or YAML.
func PrintObject(w io.Writer, format string, v any) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q", format)
}

// PrintSummary ends a run in text: what happened per target, and what to
// do next.
func PrintSummary(w io.Writer, r runbook.Result, next string) {
	st := NewStyle(w)
	counts := map[runbook.Outcome]int{}
	for _, t := range r.Targets {
		counts[t.Outcome]++
	}
	fmt.Fprintln(w)
	head := fmt.Sprintf("%s: %s", r.Runbook, r.Outcome)
	switch r.Outcome {
	case runbook.OutcomeDone:
		head = st.OK(head)
	case runbook.OutcomePlanned:
		head = st.Warn(head + " (dry run: nothing was changed)")
	default:
		head = st.Bad(head)
	}
	fmt.Fprintf(w, "%s — %d target(s):", head, len(r.Targets))
	for _, o := range []runbook.Outcome{runbook.OutcomeDone, runbook.OutcomePlanned, runbook.OutcomeBlocked, runbook.OutcomeFailed, runbook.OutcomeInterrupted, runbook.OutcomeSkipped} {
		if counts[o] > 0 {
			fmt.Fprintf(w, " %d %s", counts[o], o)
		}
	}
	fmt.Fprintln(w)
	for _, t := range r.Targets {
		if t.Outcome == runbook.OutcomeDone || t.Outcome == runbook.OutcomePlanned {
			continue
		}
		fmt.Fprintf(w, "  %s %s at %s\n", t.Target, t.Outcome, t.State)
		for _, n := range t.Notes {
			fmt.Fprintf(w, "    %s\n", n)
		}
	}
	if next != "" {
		fmt.Fprintf(w, "Next: %s\n", next)
	}
}
