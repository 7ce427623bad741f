package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// The -o values for scripts: kubectl's printers (cli-runtime's PrintFlags:
// json, yaml, jsonpath, go-template and their -file and -as-json forms)
// over the document every command prints, -o name from the command's own
// names, and custom-columns as kubectl get has them.
var templateFormats = []string{"jsonpath", "jsonpath-as-json", "jsonpath-file", "go-template", "go-template-file", "template",
	"templatefile", "custom-columns", "custom-columns-file"}

// OutputFormats are the -o values a command with text and allowed formats
// offers, for help and shell completion.
func OutputFormats(allowed ...string) []string {
	var out []string
	for _, a := range allowed {
		if a == "jsonpath" {
			out = append(out, templateFormats...)
			continue
		}
		out = append(out, a)
	}
	return out
}

// ValidateOutput checks an -o value; text is "". "jsonpath" in allowed
// admits every template form (jsonpath=…, go-template=…, custom-columns=…,
// and their files), whose template is parsed here so a typo is a usage
// error before anything runs.
func ValidateOutput(format string, allowed ...string) error {
	if format == "" {
		return nil
	}
	for _, a := range allowed {
		if format == a {
			return nil
		}
		if a == "jsonpath" && isTemplate(format) {
			_, err := templatePrinter(format)
			return err
		}
	}
	shown := make([]string, 0, len(allowed))
	for _, a := range allowed {
		if a == "jsonpath" {
			shown = append(shown, "jsonpath=TEMPLATE", "go-template=TEMPLATE", "custom-columns=SPEC")
			continue
		}
		shown = append(shown, a)
	}
	return fmt.Errorf("--output must be one of %s (or their -file forms), not %q", strings.Join(shown, "|"), format)
}

func isTemplate(format string) bool {
	name, _, _ := strings.Cut(format, "=")
	for _, t := range templateFormats {
		if name == t {
			return true
		}
	}
	return false
}

// Machine reports whether format is for scripts (json, yaml, name,
// templates) rather than a table for people ("" or wide).
func Machine(format string) bool { return format != "" && format != "wide" }

// templatePrinter is the printer of a template format. Missing keys are
// allowed, as kubectl get allows them: {.why} prints nothing for a node
// that has no why.
func templatePrinter(format string) (printers.ResourcePrinter, error) {
	name, arg, _ := strings.Cut(format, "=")
	// kubectl accepts the template quoted; so do we.
	if len(arg) >= 2 && (arg[0] == '\'' || arg[0] == '"') && arg[len(arg)-1] == arg[0] {
		arg = arg[1 : len(arg)-1]
	}
	switch name {
	case "custom-columns", "custom-columns-file":
		return newCustomColumns(name, arg)
	}
	pf := genericclioptions.NewPrintFlags("")
	f := name + "=" + arg
	pf.OutputFormat = &f
	p, err := pf.ToPrinter()
	if err != nil {
		return nil, fmt.Errorf("-o %s: %v", name, err)
	}
	return p, nil
}

// APIVersion stamps every -o json|yaml document, so scripts can tell its
// shape (and a future change of it) apart.
const APIVersion = "rollbook.dev/v1alpha1"

// PrintObject writes v as a document carrying apiVersion and kind (v's
// type name; a slice becomes a <Type>List with items) in format: json,
// yaml, a template, or -o name (v's names, see Namer).
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
	doc, err := Document(v)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: doc}
	switch {
	case format == "json":
		return (&printers.JSONPrinter{}).PrintObj(obj, w)
	case format == "yaml":
		return (&printers.YAMLPrinter{}).PrintObj(obj, w)
	case isTemplate(format):
		p, err := templatePrinter(format)
		if err != nil {
			return err
		}
		return p.PrintObj(obj, w)
	}
	return fmt.Errorf("unknown output format %q", format)
}

// List is a document of kind <Item>List with the rows under items, as
// kubectl's lists are; Extra adds fields beside items (a status's run).
type List struct {
	Kind  string
	Items any
	Extra map[string]any
}

// Object is Value's document under Kind, with Extra fields beside its own
// (a status's run), for a value whose type name is not its kind or that
// marshals itself.
type Object struct {
	Kind  string
	Value any
	Extra map[string]any
}

// Document turns v into the map every printer prints: apiVersion and kind
// set, a slice's rows under items.
func Document(v any) (map[string]any, error) {
	if o, ok := v.(Object); ok {
		doc, err := Document(o.Value)
		if err != nil {
			return nil, err
		}
		for k, x := range o.Extra {
			doc[k] = x
		}
		if err := roundTrip(doc); err != nil {
			return nil, err
		}
		doc["kind"] = o.Kind
		return doc, nil
	}
	if l, ok := v.(List); ok {
		doc := map[string]any{}
		for k, x := range l.Extra {
			doc[k] = x
		}
		b, err := json.Marshal(l.Items)
		if err != nil {
			return nil, err
		}
		var items []any
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, err
		}
		if items == nil {
			items = []any{}
		}
		if err := roundTrip(doc); err != nil {
			return nil, err
		}
		doc["items"], doc["apiVersion"], doc["kind"] = items, APIVersion, l.Kind
		return doc, nil
	}
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
		var items []any
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, err
		}
		if items == nil {
			items = []any{}
		}
		doc = map[string]any{"items": items}
	}
	doc["apiVersion"], doc["kind"] = APIVersion, kind
	return doc, nil
}

// roundTrip makes the values of doc plain JSON values (maps, slices,
// strings, float64s), as unstructured's deep copy requires.
func roundTrip(doc map[string]any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	clear(doc)
	return json.Unmarshal(b, &doc)
}

// kindNames renames Go types whose name alone says too little.
var kindNames = map[string]string{"Result": "RunResult"}

// customColumns is kubectl get's -o custom-columns=HEADER:JSONPATH,…: one
// row per item of a list (or the document itself), missing keys empty.
type customColumns struct {
	headers []string
	paths   []*jsonpath.JSONPath
}

func newCustomColumns(name, arg string) (*customColumns, error) {
	spec := arg
	if name == "custom-columns-file" {
		b, err := os.ReadFile(arg)
		if err != nil {
			return nil, fmt.Errorf("-o %s: %v", name, err)
		}
		// The file's form: a header line and a line of paths, by whitespace.
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || len(strings.Fields(lines[0])) != len(strings.Fields(lines[1])) {
			return nil, fmt.Errorf("-o %s: want a line of headers and a line of as many JSONPath expressions", name)
		}
		var cols []string
		hs, ps := strings.Fields(lines[0]), strings.Fields(lines[1])
		for i := range hs {
			cols = append(cols, hs[i]+":"+ps[i])
		}
		spec = strings.Join(cols, ",")
	}
	if spec == "" {
		return nil, fmt.Errorf("-o custom-columns needs a spec: HEADER:JSONPATH[,HEADER:JSONPATH…], e.g. NODE:.node,STATE:.state")
	}
	c := &customColumns{}
	for _, col := range strings.Split(spec, ",") {
		h, p, ok := strings.Cut(col, ":")
		if !ok || h == "" || p == "" {
			return nil, fmt.Errorf("-o custom-columns: %q is not HEADER:JSONPATH", col)
		}
		if !strings.HasPrefix(p, "{") {
			p = "{" + p + "}"
		}
		jp := jsonpath.New(h).AllowMissingKeys(true)
		if err := jp.Parse(p); err != nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %v", h, err)
		}
		c.headers, c.paths = append(c.headers, h), append(c.paths, jp)
	}
	return c, nil
}

// PrintObj implements printers.ResourcePrinter.
func (c *customColumns) PrintObj(obj runtime.Object, w io.Writer) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("-o custom-columns: %T is not a document", obj)
	}
	rows := []any{u.Object}
	if items, ok := u.Object["items"].([]any); ok {
		rows = items
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join(c.headers, "\t"))
	for _, r := range rows {
		cells := make([]string, len(c.paths))
		for i, jp := range c.paths {
			vals, err := jp.FindResults(r)
			if err != nil {
				return err
			}
			var parts []string
			for _, vs := range vals {
				for _, v := range vs {
					parts = append(parts, fmt.Sprint(v.Interface()))
				}
			}
			cells[i] = strings.Join(parts, ",")
			if cells[i] == "" {
				cells[i] = "<none>"
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}
