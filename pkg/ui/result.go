package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

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

// APIVersion stamps every -o json|yaml document, so scripts can tell its
// shape (and a future change of it) apart.
const APIVersion = "rollbook.dev/v1alpha1"

// PrintObject writes v as a JSON or YAML document carrying apiVersion and
// kind (v's type name; a slice becomes a <Type>List with items).
func PrintObject(w io.Writer, format string, v any) error {
	doc, err := document(v)
	if err != nil {
		return err
	}
	return printRaw(w, format, doc)
}

// document turns v into a map with apiVersion and kind first in meaning.
func document(v any) (map[string]any, error) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	kind := "Object"
	if t != nil {
		kind = t.Name()
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			kind = t.Elem().Name() + "List"
		}
	}
	if k, ok := kindNames[kind]; ok {
		kind = k
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	doc := map[string]any{}
	if err := json.Unmarshal(b, &doc); err != nil {
		var items any
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, err
		}
		doc = map[string]any{"items": items}
	}
	doc["apiVersion"], doc["kind"] = APIVersion, kind
	return doc, nil
}

// kindNames renames Go types whose name alone says too little.
var kindNames = map[string]string{"Result": "RunResult"}

func printRaw(w io.Writer, format string, v any) error {
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
	case runbook.OutcomePaused:
		head = st.Warn(head + " (no new node was started)")
	default:
		head = st.Bad(head)
	}
	fmt.Fprintf(w, "%s — %d target(s):", head, len(r.Targets))
	for _, o := range []runbook.Outcome{runbook.OutcomeDone, runbook.OutcomePlanned, runbook.OutcomeBlocked, runbook.OutcomeFailed,
		runbook.OutcomeInterrupted, runbook.OutcomeSkipped, runbook.OutcomePaused} {
		if counts[o] > 0 {
			fmt.Fprintf(w, " %d %s", counts[o], o)
		}
	}
	fmt.Fprintln(w)
	for _, t := range r.Targets {
		if t.Outcome == runbook.OutcomeDone || t.Outcome == runbook.OutcomePlanned {
			continue
		}
		line := fmt.Sprintf("  %s %s at %s", t.Target, t.Outcome, t.State)
		if (t.Outcome == runbook.OutcomePaused || t.Outcome == runbook.OutcomeSkipped) && t.Error != "" {
			line = fmt.Sprintf("  %s not started: %s", t.Target, t.Error)
		}
		fmt.Fprintln(w, line)
		for _, n := range t.Notes {
			fmt.Fprintf(w, "    %s\n", n)
		}
	}
	if next != "" {
		fmt.Fprintf(w, "Next: %s\n", next)
	}
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
