// Package mutate generates, for a typed API object, variants that each
// differ from it in one field of its Go type: a set field changed, an
// unset field set, a list or map grown or shrunk. An admission policy that
// must admit exactly the object is fed every variant; none may pass. The
// walk follows the type, so a field nobody listed is mutated all the same.
package mutate

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Mutation is one field of the object set to another value. Candidates
// are tried in order: the API server's validation refuses some values of
// some fields before admission sees them, and a test wants the first the
// server would accept.
type Mutation struct {
	Path string
	// Boundary is the shallowest field on Path the object leaves unset
	// (empty when every field on it is set): a policy refuses a whole
	// unset subtree with one rule, so one refused mutation under a
	// boundary proves the rule.
	Boundary   string
	Candidates []any
	steps      []step
}

type step struct {
	field string // struct field, by Go name
	index int    // slice index (may be one past the end: append)
	key   string // map key
	kind  reflect.Kind
}

// Apply sets the mutation's field of obj (a pointer) to candidate i.
func (m Mutation) Apply(obj any, i int) error {
	return set(reflect.ValueOf(obj).Elem(), m.steps, m.Candidates[i])
}

// Describe is the mutation with candidate i, for a report.
func (m Mutation) Describe(i int) string {
	return fmt.Sprintf("%s = %v", m.Path, show(m.Candidates[i]))
}

func show(v any) string {
	switch x := v.(type) {
	case removeItem:
		return "<last item removed>"
	case deleteKey:
		return "<key removed>"
	case string:
		return strconv.Quote(x)
	}
	return fmt.Sprintf("%v", v)
}

// removeItem and deleteKey are candidates that shrink a list or a map.
type (
	removeItem struct{}
	deleteKey  struct{}
)

// Options steer the walk.
type Options struct {
	// Skip are paths (JSON names; [*] for any index) not to mutate: the
	// server's own fields, and a policy's holes, which a test mutates
	// with values of its own.
	Skip []string
	// MaxDepth bounds the walk into unset structures.
	MaxDepth int
}

// Of returns one mutation per field of obj's type (a pointer to a struct).
func Of(obj any, o Options) []Mutation {
	if o.MaxDepth == 0 {
		o.MaxDepth = 12
	}
	g := gen{o: o, skip: map[string]bool{}}
	for _, s := range o.Skip {
		g.skip[s] = true
	}
	g.walk(reflect.ValueOf(obj).Elem(), "", "", nil, 0)
	return g.out
}

type gen struct {
	o    Options
	skip map[string]bool
	out  []Mutation
}

var anyIndex = regexp.MustCompile(`\[[0-9]+\]`)

func (g *gen) skipped(path string) bool {
	if g.skip[path] || g.skip[anyIndex.ReplaceAllString(path, "[*]")] {
		return true
	}
	for p := range g.skip {
		if strings.HasSuffix(p, ".*") && strings.HasPrefix(path, strings.TrimSuffix(p, "*")) {
			return true
		}
	}
	return false
}

func (g *gen) add(path, boundary string, steps []step, candidates []any) {
	if len(candidates) == 0 || g.skipped(path) {
		return
	}
	g.out = append(g.out, Mutation{Path: path, Boundary: boundary, Candidates: candidates, steps: append([]step(nil), steps...)})
}

// walk visits v (which may be the zero value of an unset field); boundary
// is the unset field it is under, if any.
func (g *gen) walk(v reflect.Value, path, boundary string, steps []step, depth int) {
	if depth > g.o.MaxDepth || (path != "" && g.skipped(path)) {
		return
	}
	t := v.Type()
	if boundary == "" && path != "" && v.IsZero() {
		boundary = path
	}
	if t.Kind() == reflect.Pointer {
		var elem reflect.Value
		if v.IsNil() {
			elem = reflect.Zero(t.Elem())
		} else {
			elem = v.Elem()
		}
		if leaf(t.Elem()) {
			var cur any
			if !v.IsNil() {
				cur = elem.Interface()
			}
			g.add(path, boundary, steps, candidates(t.Elem(), cur, !v.IsNil()))
			return
		}
		g.walk(elem, path, boundary, steps, depth)
		return
	}
	switch {
	case leaf(t):
		set := !v.IsZero()
		g.add(path, boundary, steps, candidates(t, v.Interface(), set))
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, inline := jsonName(f)
			if name == "" && !inline {
				continue
			}
			p := path
			if !inline {
				p = join(path, name)
			}
			g.walk(v.Field(i), p, boundary, append(steps, step{field: f.Name, kind: reflect.Struct}), depth+1)
		}
	case t.Kind() == reflect.Slice:
		n := v.Len()
		for i := range n {
			g.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i), boundary, append(steps, step{index: i, kind: reflect.Slice}), depth+1)
		}
		np := fmt.Sprintf("%s[%d]", path, n)
		if n > 0 {
			g.add(path, boundary, steps, []any{removeItem{}})
			// One more item: a copy of the last, told apart by one of its
			// strings (a name, mostly), since exact duplicates are invalid.
			g.add(np, np, append(steps, step{index: n, kind: reflect.Slice}), variants(v.Index(n-1)))
			return
		}
		// A first item: one field set, for every field of the item (from a
		// valid seed where the API requires one).
		seed := reflect.Zero(t.Elem())
		if s, ok := seedOf(t.Elem()); ok {
			seed = s
		}
		g.walk(seed, np, boundary, append(steps, step{index: n, kind: reflect.Slice}), depth+1)
	case t.Kind() == reflect.Map:
		if !leaf(t.Elem()) || t.Key().Kind() != reflect.String {
			return
		}
		for _, k := range v.MapKeys() {
			key := k.String()
			kp := fmt.Sprintf("%s[%s]", path, strconv.Quote(key))
			values := append(candidates(t.Elem(), v.MapIndex(k).Interface(), true), deleteKey{})
			g.add(kp, boundary, append(steps, step{key: key, kind: reflect.Map}), values)
		}
		kp := fmt.Sprintf("%s[%q]", path, "mutate.rollbook.dev/x")
		b := boundary
		if b == "" {
			b = kp
		}
		g.add(kp, b, append(steps, step{key: "mutate.rollbook.dev/x", kind: reflect.Map}), candidates(t.Elem(), nil, false))
	}
}

func jsonName(f reflect.StructField) (name string, inline bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "-" {
		return "", false
	}
	if strings.Contains(opts, "inline") || (f.Anonymous && name == "") {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// set follows steps from v, allocating what is unset, and sets the leaf.
func set(v reflect.Value, steps []step, val any) error {
	for i, s := range steps {
		last := i == len(steps)-1
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				p := reflect.New(v.Type().Elem())
				if s, ok := seedOf(v.Type().Elem()); ok {
					p.Elem().Set(s)
				}
				v.Set(p)
			}
			v = v.Elem()
		}
		switch s.kind {
		case reflect.Struct:
			if oneOf[v.Type()] {
				// A union: setting one member means leaving the others.
				keep := v.FieldByName(s.field)
				saved := reflect.New(keep.Type()).Elem()
				saved.Set(keep)
				v.Set(reflect.Zero(v.Type()))
				v.FieldByName(s.field).Set(saved)
			}
			v = v.FieldByName(s.field)
		case reflect.Slice:
			if v.Len() <= s.index {
				grown := reflect.MakeSlice(v.Type(), s.index+1, s.index+1)
				reflect.Copy(grown, v)
				if seed, ok := seedOf(v.Type().Elem()); ok {
					grown.Index(s.index).Set(seed)
				}
				v.Set(grown)
			}
			v = v.Index(s.index)
		case reflect.Map:
			if v.IsNil() {
				v.Set(reflect.MakeMap(v.Type()))
			}
			if _, del := val.(deleteKey); del {
				v.SetMapIndex(reflect.ValueOf(s.key).Convert(v.Type().Key()), reflect.Value{})
				return nil
			}
			if !last {
				return fmt.Errorf("mutate: a map of structures at %s", s.key)
			}
			x := reflect.ValueOf(val)
			if !x.CanConvert(v.Type().Elem()) {
				return ErrNotApplicable
			}
			v.SetMapIndex(reflect.ValueOf(s.key).Convert(v.Type().Key()), x.Convert(v.Type().Elem()))
			return nil
		}
	}
	if w, ok := val.(whole); ok {
		v.Set(reflect.ValueOf(w.v))
		return nil
	}
	if _, rm := val.(removeItem); rm {
		for v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Len() == 0 {
			return ErrNotApplicable // the object changed since the mutation was generated
		}
		v.Set(v.Slice(0, v.Len()-1))
		return nil
	}
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	x := reflect.ValueOf(val)
	if !x.CanConvert(t) || (x.Kind() == reflect.String) != (t.Kind() == reflect.String) {
		return ErrNotApplicable
	}
	if v.Kind() == reflect.Pointer {
		p := reflect.New(t)
		p.Elem().Set(x.Convert(t))
		v.Set(p)
		return nil
	}
	v.Set(x.Convert(t))
	return nil
}

// ErrNotApplicable says the candidate is not a value of the field's type.
var ErrNotApplicable = errors.New("mutate: the candidate is not of the field's type")

// variants of item: copies with one top-level string field changed.
func variants(item reflect.Value) []any {
	for item.Kind() == reflect.Pointer {
		item = item.Elem()
	}
	if item.Kind() != reflect.Struct {
		c := reflect.New(item.Type()).Elem()
		c.Set(item)
		if c.Kind() == reflect.String {
			c.SetString(c.String() + "x")
		}
		return []any{whole{c.Interface()}}
	}
	var out []any
	for i := range item.NumField() {
		f := item.Field(i)
		if f.Kind() != reflect.String || !item.Type().Field(i).IsExported() {
			continue
		}
		c := reflect.New(item.Type()).Elem()
		c.Set(item)
		c.Field(i).SetString(f.String() + "x")
		out = append(out, whole{deepCopy(c).Interface()})
	}
	if len(out) == 0 {
		out = append(out, whole{deepCopy(item).Interface()})
	}
	return out
}

// whole is a candidate that replaces a whole item.
type whole struct{ v any }

func (w whole) String() string { return fmt.Sprintf("%+v", w.v) }

// deepCopy copies v through its DeepCopy method where it has one.
func deepCopy(v reflect.Value) reflect.Value {
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	if m := p.MethodByName("DeepCopy"); m.IsValid() {
		return m.Call(nil)[0].Elem()
	}
	return v
}

// oneOf are the API's unions: exactly one member is set.
var oneOf = map[reflect.Type]bool{
	reflect.TypeFor[corev1.VolumeSource]():     true,
	reflect.TypeFor[corev1.EnvVarSource]():     true,
	reflect.TypeFor[corev1.VolumeProjection](): true,
	reflect.TypeFor[corev1.ProbeHandler]():     true,
	reflect.TypeFor[corev1.LifecycleHandler](): true,
}

// Adapt returns candidates the API server named as the only supported
// values of a field in its refusal (err), to try next.
func Adapt(err error) []any {
	if err == nil {
		return nil
	}
	msg := err.Error()
	i := strings.Index(msg, "supported values: ")
	if i < 0 {
		return nil
	}
	var out []any
	for _, q := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(msg[i:], 8) {
		out = append(out, q[1])
	}
	return out
}

// WithCandidates is m trying these values instead.
func (m Mutation) WithCandidates(values []any) Mutation {
	m.Candidates = values
	return m
}
