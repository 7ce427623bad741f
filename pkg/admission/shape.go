package admission

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Rule is one validation of a ValidatingAdmissionPolicy.
type Rule struct {
	Expression string `json:"expression"`
	Message    string `json:"message,omitempty"`
}

// Hole pins a value that varies between admitted objects. at is the CEL
// expression of the value (e.g. "object.spec.nodeName"); the hole's rules
// are evaluated only where the value's parents exist, and say themselves
// whether the value may be unset (has(at)).
type Hole func(at string) []Rule

// Shape is one object as its renderer makes it.
type Shape struct {
	// Object is the rendered object, e.g. a *corev1.Pod.
	Object any
	// Holes are the paths whose values vary, each pinned by its own rules.
	// Paths are JSON paths: "spec.containers[0].image", "metadata.labels".
	Holes map[string]Hole
	// Defaults are values the API server fills in before admission where
	// the renderer leaves a field unset (JSON values; an object default
	// admits the object with only the defaulted fields).
	Defaults map[string]any
	// Ignore are paths the server owns or a binding already pins; never
	// looked at.
	Ignore []string
}

// Rules returns the rules an object at root (a CEL variable such as
// "object") must pass to be admitted as s: equal to s.Object outside the
// holes, every field the Go type has but the rendering leaves out absent.
func (s Shape) Rules(root string) ([]Rule, error) {
	v, err := jsonValue(s.Object)
	if err != nil {
		return nil, err
	}
	w := walker{shape: s, ignore: map[string]bool{}, usedHoles: map[string]bool{}}
	for _, p := range s.Ignore {
		w.ignore[p] = true
	}
	t := reflect.TypeOf(s.Object)
	w.walk(t, v, "", root, nil)
	for p := range s.Holes {
		if !w.usedHoles[p] {
			return nil, fmt.Errorf("hole %s is not a path of the rendered object", p)
		}
	}
	return w.rules, nil
}

type walker struct {
	shape     Shape
	ignore    map[string]bool
	usedHoles map[string]bool
	rules     []Rule
}

// add appends a rule that must hold where every guard holds: a missing
// parent makes the rule false (refused), never an evaluation error.
func (w *walker) add(guards []string, expr, msg string) {
	if len(guards) > 0 {
		expr = strings.Join(guards, " && ") + " && (" + expr + ")"
	}
	w.rules = append(w.rules, Rule{Expression: expr, Message: msg})
}

func (w *walker) walk(t reflect.Type, v any, path, at string, guards []string) {
	if h, ok := w.shape.Holes[path]; ok {
		w.usedHoles[path] = true
		for _, r := range h(at) {
			w.add(guards, r.Expression, r.Message)
		}
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case isLeaf(t):
		w.add(guards, at+" == "+literal(v), display(path)+" is "+shortLiteral(v))
	case t.Kind() == reflect.Struct:
		w.walkStruct(t, asMap(v), path, at, guards)
	case t.Kind() == reflect.Slice:
		items, _ := v.([]any)
		w.add(guards, fmt.Sprintf("size(%s) == %d", at, len(items)), fmt.Sprintf("%s has %d item(s)", display(path), len(items)))
		for i, item := range items {
			g := append(append([]string(nil), guards...), fmt.Sprintf("size(%s) > %d", at, i))
			w.walk(t.Elem(), item, fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("%s[%d]", at, i), g)
		}
	case t.Kind() == reflect.Map:
		m := asMap(v)
		keys := sortedKeys(m)
		conds := []string{fmt.Sprintf("size(%s) == %d", at, len(keys))}
		var shown []string
		for _, k := range keys {
			q := literal(k)
			conds = append(conds, q+" in "+at, at+"["+q+"] == "+literal(m[k]))
			shown = append(shown, k+": "+shortLiteral(m[k]))
		}
		w.add(guards, strings.Join(conds, " && "), display(path)+" is exactly {"+strings.Join(shown, ", ")+"}")
	default:
		panic(fmt.Sprintf("admission: %s: unsupported kind %s", path, t.Kind()))
	}
}

func (w *walker) walkStruct(t reflect.Type, m map[string]any, path, at string, guards []string) {
	var absent []string
	for _, f := range jsonFields(t) {
		p := join(path, f.name)
		if w.ignore[p] || w.ignore[anyIndex(p)] {
			continue
		}
		fat := at + "." + celField(f.name)
		if untyped(f.typ) {
			fat = "dyn(" + at + ")." + celField(f.name)
		}
		if h, ok := w.shape.Holes[p]; ok {
			// Set or not, the hole's own rules decide (has() is theirs).
			w.usedHoles[p] = true
			for _, r := range h(fat) {
				w.add(guards, r.Expression, r.Message)
			}
			continue
		}
		if v, ok := m[f.name]; ok {
			w.walk(f.typ, v, p, fat, append(append([]string(nil), guards...), "has("+fat+")"))
			continue
		}
		if d, ok := w.shape.defaultOf(p); ok {
			// Either unset, or set to exactly the server's default.
			sub := walker{shape: w.shape, ignore: w.ignore, usedHoles: w.usedHoles}
			sub.walk(f.typ, d, p, fat, nil)
			var conds []string
			for _, r := range sub.rules {
				conds = append(conds, "("+r.Expression+")")
			}
			w.add(guards, "!has("+fat+") || ("+strings.Join(conds, " && ")+")",
				display(p)+" is unset or "+shortLiteral(d))
			continue
		}
		absent = append(absent, f.name)
	}
	if len(absent) == 0 {
		return
	}
	var conds []string
	for _, n := range absent {
		fat := at + "." + celField(n)
		if untypedField(t, n) {
			fat = "dyn(" + at + ")." + celField(n)
		}
		conds = append(conds, "!has("+fat+")")
	}
	where := display(path)
	if where == "" {
		where = "the object"
	}
	w.add(guards, strings.Join(conds, " && "), where+" sets none of "+strings.Join(absent, ", "))
}

// defaultOf is the server's default at p, given for p itself or for every
// index of its lists ("spec.volumes[*].configMap.defaultMode").
func (s Shape) defaultOf(p string) (any, bool) {
	d, ok := s.Defaults[p]
	if !ok {
		d, ok = s.Defaults[anyIndex(p)]
	}
	if !ok {
		return nil, false
	}
	v, err := jsonValue(d)
	if err != nil {
		panic(fmt.Sprintf("admission: default of %s: %v", p, err))
	}
	return v, true
}

// jsonValue is v as encoding/json decodes it (numbers as json.Number).
func jsonValue(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	err = dec.Decode(&out)
	return out, err
}

var index = regexp.MustCompile(`\[[0-9]+\]`)

func anyIndex(p string) string { return index.ReplaceAllString(p, "[*]") }

// Condition is one CEL condition that holds iff the value at at passes
// every rule of s: for an item of a list that may take several shapes.
func (s Shape) Condition(at string) (string, error) {
	rules, err := s.Rules(at)
	if err != nil {
		return "", err
	}
	conds := make([]string, len(rules))
	for i, r := range rules {
		conds[i] = "(" + r.Expression + ")"
	}
	return strings.Join(conds, " && "), nil
}

type field struct {
	name string
	typ  reflect.Type
}

// jsonFields are t's fields as JSON names them, inlined structs flattened.
func jsonFields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") || (sf.Anonymous && name == "") {
			out = append(out, jsonFields(sf.Type)...)
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, field{name: name, typ: sf.Type})
	}
	return out
}

// untyped are fields Kubernetes' CEL type checker does not know (maps of
// Quantity: requests, limits, overhead): read through dyn(), which is
// checked when the policy runs instead.
func untyped(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Map && t.Elem() == reflect.TypeFor[resource.Quantity]()
}

func untypedField(t reflect.Type, name string) bool {
	for _, f := range jsonFields(t) {
		if f.name == name {
			return untyped(f.typ)
		}
	}
	return false
}

// isLeaf: scalars, and the API's own scalar types (Quantity, Time,
// IntOrString), which marshal themselves to one JSON value.
func isLeaf(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	case reflect.Struct:
		_, ok := reflect.PointerTo(t).MethodByName("MarshalJSON")
		if !ok {
			_, ok = t.MethodByName("MarshalJSON")
		}
		return ok
	}
	return false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func display(path string) string { return path }

// celReserved are CEL's reserved words; Kubernetes exposes a property of
// such a name as __name__.
var celReserved = map[string]bool{
	"true": true, "false": true, "null": true, "in": true, "as": true, "break": true, "const": true, "continue": true,
	"else": true, "for": true, "function": true, "if": true, "import": true, "let": true, "loop": true,
	"package": true, "namespace": true, "return": true, "var": true, "void": true, "while": true,
}

func celField(name string) string {
	if celReserved[name] {
		return "__" + name + "__"
	}
	return name
}

// literal is v as a CEL literal.
func literal(v any) string {
	switch x := v.(type) {
	case string:
		return Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return strconv.FormatInt(i, 10)
		}
		return x.String()
	case nil:
		return "null"
	}
	panic(fmt.Sprintf("admission: no CEL literal for %T", v))
}

// Quote is s as a CEL string literal.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch r {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func shortLiteral(v any) string {
	raw, _ := json.Marshal(v)
	s := string(raw)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
