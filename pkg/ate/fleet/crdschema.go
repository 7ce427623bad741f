package fleet

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// The WorkerPool schema the API server serves. A CRD's structural schema
// prunes, on every write, each field it does not declare (Kubernetes: CRD
// "field pruning"), so a clone written with a field of a newer release
// (runbook step 1 skipped) is stored without it: what the schema declares
// is what a write keeps.

// crdGVR is the CustomResourceDefinition resource.
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// WorkerPoolCRDName is the WorkerPool CRD's name.
var WorkerPoolCRDName = WorkerPoolGVR.Resource + "." + WorkerPoolGVR.Group

// Schema is the served WorkerPool version's openAPIV3Schema.
type Schema struct {
	root map[string]any
}

// ReadSchema reads the served WorkerPool schema. It returns nil (and no
// error) when the CRD may not be read or has no schema: whoever asks then
// checks what was written by reading it back instead.
func ReadSchema(ctx context.Context, dyn dynamic.Interface) (*Schema, error) {
	u, err := dyn.Resource(crdGVR).Get(ctx, WorkerPoolCRDName, metav1.GetOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CRD %s: %w", WorkerPoolCRDName, err)
	}
	return SchemaOf(u), nil
}

// SchemaOf is the schema of the served WorkerPool version in the CRD u
// (nil when it has none).
func SchemaOf(u *unstructured.Unstructured) *Schema {
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if m["name"] != WorkerPoolGVR.Version || m["served"] != true {
			continue
		}
		if root, ok, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema"); ok {
			return &Schema{root: root}
		}
	}
	return nil
}

// node is the schema of the field at path below the root ("spec", …).
func (s *Schema) node(path ...string) (map[string]any, bool) {
	n := s.root
	for _, k := range path {
		if preserves(n) {
			return map[string]any{"x-kubernetes-preserve-unknown-fields": true}, true
		}
		props, _ := n["properties"].(map[string]any)
		child, ok := props[k].(map[string]any)
		if !ok {
			if ap, isMap := n["additionalProperties"].(map[string]any); isMap {
				child, ok = ap, true
			}
		}
		if !ok {
			return nil, false
		}
		n = child
	}
	return n, true
}

func preserves(n map[string]any) bool { return n["x-kubernetes-preserve-unknown-fields"] == true }

// Has says whether the schema declares the field at path (below the root:
// "spec", "sandboxClasses").
func (s *Schema) Has(path ...string) bool {
	_, ok := s.node(path...)
	return ok
}

// HasDefault says whether the schema defaults the field at path.
func (s *Schema) HasDefault(path ...string) bool {
	n, ok := s.node(path...)
	_, def := n["default"]
	return ok && def
}

// Pruned lists the fields of obj (an object stored at path) a write
// would drop: every path the schema does not declare, dotted.
func (s *Schema) Pruned(obj map[string]any, path ...string) []string {
	var out []string
	var walk func(v any, at []string)
	walk = func(v any, at []string) {
		n, ok := s.node(at...)
		if !ok {
			out = append(out, strings.Join(at, "."))
			return
		}
		if preserves(n) {
			return
		}
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				walk(c, append(append([]string(nil), at...), k))
			}
		case []any:
			items, _ := n["items"].(map[string]any)
			for _, c := range x {
				if m, isMap := c.(map[string]any); isMap && items != nil {
					sub := &Schema{root: items}
					for _, p := range sub.Pruned(m) {
						out = append(out, strings.Join(at, ".")+"[]."+p)
					}
				}
			}
		}
	}
	for k, c := range obj {
		walk(c, append(append([]string(nil), path...), k))
	}
	sort.Strings(out)
	return dedupe(out)
}

func dedupe(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// SpecDiff compares two WorkerPool specs field by field and names every
// path where they differ ("spec.a.b: X in want, Y stored"). ignore lists
// dotted paths below spec left out of the comparison; a field only in got
// that the schema (when known) defaults is not a difference.
func SpecDiff(want, got map[string]any, s *Schema, ignore ...string) []string {
	skip := map[string]bool{}
	for _, p := range ignore {
		skip["spec."+p] = true
	}
	var out []string
	var cmp func(a, b any, at []string)
	cmp = func(a, b any, at []string) {
		path := strings.Join(at, ".")
		if skip[path] {
			return
		}
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for k := range keys {
				cmp(am[k], bm[k], append(append([]string(nil), at...), k))
			}
			return
		}
		switch {
		case reflect.DeepEqual(a, b):
		case b == nil:
			out = append(out, path+": "+brief(a)+" in the source, missing in the clone (pruned on write?)")
		case a == nil && s != nil && s.HasDefault(at...):
		case a == nil:
			out = append(out, path+": only in the clone ("+brief(b)+")")
		default:
			out = append(out, path+": "+brief(a)+" in the source, "+brief(b)+" in the clone")
		}
	}
	cmp(want, got, []string{"spec"})
	sort.Strings(out)
	return out
}

func brief(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}
