package ui

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// Namer is what -o name prints: one kind/name per line, as kubectl does.
type Namer interface{ Names() []string }

// Named gives a value without names of its own the names -o name prints.
func Named(v any, names []string) Namer { return named{v, names} }

type named struct {
	v     any
	names []string
}

func (n named) Names() []string { return n.names }

// names returns what -o name prints for v: a Namer's names, or each target
// of a run result as the object it is.
func names(v any) ([]string, error) {
	switch v := v.(type) {
	case Namer:
		return v.Names(), nil
	case runbook.Result:
		return resultNames(v), nil
	case *runbook.Result:
		return resultNames(*v), nil
	}
	return nil, fmt.Errorf("-o name: %T has no names", v)
}

func resultNames(r runbook.Result) []string {
	out := make([]string, 0, len(r.Targets))
	for _, t := range r.Targets {
		out = append(out, ObjectName(t.Ref.Kind, t.Ref.Name, t.Target))
	}
	return out
}

// ObjectName is kubectl's -o name form, "node/tt-node-1"; fallback when the
// kind or the name is unknown.
func ObjectName(kind, name, fallback string) string {
	if kind == "" || name == "" {
		return fallback
	}
	return strings.ToLower(kind) + "/" + name
}

// PrintSummary ends a run in text: what happened per target, and what to
// do next.
func PrintSummary(out io.Writer, r runbook.Result, next string) {
	st := NewStyle(out)
	var w strings.Builder
	defer func() { _, _ = io.WriteString(out, Fit(w.String(), Width(out), 4)) }()
	counts := map[runbook.Outcome]int{}
	for _, t := range r.Targets {
		counts[t.Outcome]++
	}
	fmt.Fprintln(&w)
	head := fmt.Sprintf("%s: %s", r.Runbook, r.Outcome)
	switch r.Outcome {
	case runbook.OutcomeDone:
		head = st.OK(head)
	case runbook.OutcomePlanned:
		head = st.Warn(head + " (dry run: nothing was changed)")
	case runbook.OutcomePaused:
		head = st.Warn(head + " (no new node was started)")
	default:
		head = st.Bad(head)
	}
	fmt.Fprintf(&w, "%s — %d target(s):", head, len(r.Targets))
	for _, o := range []runbook.Outcome{runbook.OutcomeDone, runbook.OutcomePlanned, runbook.OutcomeBlocked, runbook.OutcomeFailed,
		runbook.OutcomeInterrupted, runbook.OutcomeSkipped, runbook.OutcomePaused} {
		if counts[o] > 0 {
			fmt.Fprintf(&w, " %d %s", counts[o], o)
		}
	}
	fmt.Fprintln(&w)
	if r.DryRun && len(r.Targets) > 0 {
		writePlanTable(&w, r)
	}
	for _, t := range r.Targets {
		if t.Outcome == runbook.OutcomeDone || t.Outcome == runbook.OutcomePlanned {
			continue
		}
		line := fmt.Sprintf("  %s %s at %s", t.Target, t.Outcome, t.State)
		if (t.Outcome == runbook.OutcomePaused || t.Outcome == runbook.OutcomeSkipped) && t.Error != "" {
			line = fmt.Sprintf("  %s not started: %s", t.Target, t.Error)
		}
		fmt.Fprintln(&w, line)
		for _, n := range t.Notes {
			fmt.Fprintf(&w, "    %s\n", n)
		}
	}
	if next != "" {
		fmt.Fprintf(&w, "Next: %s\n", next)
	}
}

// writePlanTable is a dry run's plan at a glance, one row per target (as
// kubeadm's upgrade plan): what it would do first, how many objects the
// plan changes, and the sum of the timeouts of its steps left (those that
// have one): the time the roll allows it, not an estimate.
func writePlanTable(w io.Writer, r runbook.Result) {
	rows := make([][]string, 0, len(r.Targets))
	for _, t := range r.Targets {
		plan, first, changes, budget := "nothing to do", "-", 0, time.Duration(0)
		for _, s := range t.Steps {
			if s.Status == runbook.StepDone {
				continue
			}
			changes += len(s.Changes)
			budget += s.Budget
			if first == "-" && (s.Status == runbook.StepWouldAct || s.Status == runbook.StepBlocked) {
				first = s.Title
			}
		}
		switch t.Outcome {
		case runbook.OutcomePlanned:
			plan = "would act"
		case runbook.OutcomeBlocked:
			plan = "blocked"
		case runbook.OutcomeDone:
		default:
			plan = string(t.Outcome)
		}
		most := "-"
		if budget > 0 {
			most = budget.String()
		}
		rows = append(rows, []string{t.Target, plan, first, strconv.Itoa(changes), most})
	}
	fmt.Fprintln(w, "Plan:")
	_ = Table(w, []string{"target", "plan", "first step", "changes", "budget"}, rows)
}

// Table writes rows under headers, aligned in columns (kubectl's style: no
// borders, upper-case headers).
func Table(w io.Writer, headers []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(headers, "\t")))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}
