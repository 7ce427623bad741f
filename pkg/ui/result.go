package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// ValidateOutput checks an -o value; text is "". "jsonpath" in allowed
// admits -o jsonpath=TEMPLATE, whose template is parsed here so a typo is a
// usage error before anything runs.
func ValidateOutput(format string, allowed ...string) error {
	if format == "" {
		return nil
	}
	for _, a := range allowed {
		if format == a {
			return nil
		}
		if a == "jsonpath" && strings.HasPrefix(format, jsonpathPrefix) {
			_, err := parseJSONPath(format)
			return err
		}
	}
	shown := make([]string, len(allowed))
	for i, a := range allowed {
		shown[i] = a
		if a == "jsonpath" {
			shown[i] = "jsonpath=TEMPLATE"
		}
	}
	return fmt.Errorf("--output must be one of %s, not %q", strings.Join(shown, "|"), format)
}

// Machine reports whether format is for scripts (json, yaml, name,
// jsonpath=…) rather than a table for people ("" or wide).
func Machine(format string) bool { return format != "" && format != "wide" }

const jsonpathPrefix = "jsonpath="

func parseJSONPath(format string) (*jsonpath.JSONPath, error) {
	tmpl := strings.TrimPrefix(format, jsonpathPrefix)
	// kubectl accepts the template quoted; so do we.
	if len(tmpl) >= 2 && (tmpl[0] == '\'' || tmpl[0] == '"') && tmpl[len(tmpl)-1] == tmpl[0] {
		tmpl = tmpl[1 : len(tmpl)-1]
	}
	jp := jsonpath.New("output")
	if err := jp.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("-o jsonpath: %v", err)
	}
	return jp, nil
}

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

// APIVersion stamps every -o json|yaml document, so scripts can tell its
// shape (and a future change of it) apart.
const APIVersion = "rollbook.dev/v1alpha1"

// PrintObject writes v as a JSON or YAML document carrying apiVersion and
// kind (v's type name; a slice becomes a <Type>List with items).
// -o name prints v's names (see Namer), -o jsonpath=… the template applied
// to that document.
func PrintObject(w io.Writer, format string, v any) error {
	if format == "name" {
		ns, err := names(v)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if _, err := fmt.Fprintln(w, n); err != nil {
				return err
			}
		}
		return nil
	}
	if n, ok := v.(named); ok {
		v = n.v
	}
	doc, err := document(v)
	if err != nil {
		return err
	}
	if strings.HasPrefix(format, jsonpathPrefix) {
		jp, err := parseJSONPath(format)
		if err != nil {
			return err
		}
		return jp.Execute(w, doc)
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
