package roll

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
)

// servedSchema is the sim's WorkerPool CRD (the real one's fields), or the
// same without spec.sandboxClasses: a release before it (step 1 not run).
func servedSchema(t *testing.T, old bool) *fleet.Schema {
	t.Helper()
	b, err := os.ReadFile("../../../sim/substrate/workerpool.crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	if old {
		versions, _, _ := unstructured.NestedSlice(m, "spec", "versions")
		v := versions[0].(map[string]any)
		unstructured.RemoveNestedField(v, "schema", "openAPIV3Schema", "properties", "spec", "properties", "sandboxClasses")
		_ = unstructured.SetNestedSlice(m, versions, "spec", "versions")
	}
	s := fleet.SchemaOf(u)
	if s == nil {
		t.Fatal("no schema in the CRD")
	}
	return s
}

// richPool is a pool whose spec sets every kind of field the CRD has.
func richPool(class string) fleet.Pool {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ate.dev/v1alpha1", "kind": "WorkerPool",
		"metadata": map[string]any{"name": "batch", "namespace": "ns"},
		"spec": map[string]any{"replicas": int64(3), "workerImage": "old@sha256:" + strings.Repeat("a", 64), "sandboxClass": class,
			"template": map[string]any{
				"labels":            map[string]any{"team": "platform"},
				"annotations":       map[string]any{"note": "x"},
				"nodeSelector":      map[string]any{fleet.VersionLabel: "v1", "pool": "big"},
				"tolerations":       []any{map[string]any{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}},
				"nodeAffinity":      map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"x": "y"}},
				"priorityClassName": "high", "serviceAccountName": "runner",
				"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
				"resources": map[string]any{"limits": map[string]any{"cpu": "2", "memory": "4Gi"},
					"requests": map[string]any{"cpu": "1"}}}}}}
	u.SetLabels(map[string]string{"runtime": "python"})
	return fleet.PoolOf(u)
}

func TestPlanClonesFollowsTheServedSchema(t *testing.T) {
	old := richPool("microvm")
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, old)
	img := Images{Any: "new@sha256:" + strings.Repeat("b", 64)}
	for _, tc := range []struct {
		name      string
		schema    *fleet.Schema
		wantClass string // the field the clone names its class in
	}{
		{"new schema: sandboxClasses", servedSchema(t, false), "sandboxClasses"},
		{"old schema (step 1 not run): sandboxClass, as its source", servedSchema(t, true), "sandboxClass"},
	} {
		plans, err := PlanClonesFor(c, img, tc.schema)
		if err != nil || len(plans) != 1 {
			t.Fatalf("%s: %v %v", tc.name, plans, err)
		}
		spec := plans[0].Object.Object["spec"].(map[string]any)
		if _, ok := spec[tc.wantClass]; !ok || len(tc.schema.Pruned(spec, "spec")) > 0 {
			t.Errorf("%s: clone spec %v, pruned %v", tc.name, spec, tc.schema.Pruned(spec, "spec"))
		}
		if got := fleet.PoolOf(plans[0].Object); got.SandboxClass != "microvm" {
			t.Errorf("%s: the clone's class is %q", tc.name, got.SandboxClass)
		}
		if d := CloneDiff(old, fleet.PoolOf(plans[0].Object), tc.schema); len(d) != 0 {
			t.Errorf("%s: a planned clone differs from its source: %v", tc.name, d)
		}
	}
	// A source field the schema does not declare would be dropped from the
	// clone: refused, naming step 1.
	s := servedSchema(t, false)
	_ = unstructured.SetNestedField(old.Object.Object, "on", "spec", "template", "hugepages")
	c = fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, fleet.PoolOf(old.Object))
	if _, err := PlanClonesFor(c, img, s); err == nil || !strings.Contains(err.Error(), "spec.template.hugepages") ||
		!strings.Contains(err.Error(), "step 1") {
		t.Fatalf("a field the schema lacks: %v", err)
	}
}

// leaves are the dotted paths of every leaf of m (list items by index).
func leaves(v any, at string, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			leaves(c, at+"\x00"+k, out)
		}
	case []any:
		for i, c := range x {
			leaves(c, fmt.Sprintf("%s\x00#%d", at, i), out)
		}
	default:
		*out = append(*out, at)
	}
}

// mutateAt changes (change), removes or adds a sibling next to the leaf at
// path in a deep copy of u.
func mutateAt(u *unstructured.Unstructured, path, how string) *unstructured.Unstructured {
	c := u.DeepCopy()
	keys := strings.Split(strings.TrimPrefix(path, "\x00"), "\x00")
	var cur any = c.Object
	for i, k := range keys {
		last := i == len(keys)-1
		switch node := cur.(type) {
		case map[string]any:
			if !last {
				cur = node[k]
				continue
			}
			switch how {
			case "change":
				node[k] = fmt.Sprint(node[k]) + "-changed"
			case "remove":
				delete(node, k)
			case "add":
				node[k+"-extra"] = "added"
			}
		case []any:
			var idx int
			fmt.Sscanf(k, "#%d", &idx)
			if !last {
				cur = node[idx]
				continue
			}
			node[idx] = fmt.Sprint(node[idx]) + "-changed"
		}
	}
	return c
}

// TestCloneDiffSeesEveryField mutates every field of a clone, one at a
// time (changed, removed, a sibling added): each must be named, except
// the image, the pin and the spelling of the class, which a clone changes.
func TestCloneDiffSeesEveryField(t *testing.T) {
	source := richPool("microvm")
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, source)
	plans, err := PlanClonesFor(c, Images{Any: "new@sha256:" + strings.Repeat("b", 64)}, servedSchema(t, false))
	if err != nil {
		t.Fatal(err)
	}
	clone := plans[0].Object
	var paths []string
	leaves(clone.Object["spec"], "\x00spec", &paths)
	sort.Strings(paths)
	allowed := map[string]bool{"spec.workerImage": true, "spec.template.nodeSelector." + fleet.VersionLabel: true}
	checked := 0
	for _, p := range paths {
		dotted := strings.ReplaceAll(strings.TrimPrefix(p, "\x00"), "\x00", ".")
		for _, how := range []string{"change", "remove", "add"} {
			if how != "change" && strings.Contains(p, "#") {
				continue
			}
			got := mutateAt(clone, p, how)
			d := CloneDiff(source, fleet.PoolOf(got), nil)
			switch {
			case allowed[dotted] && how != "add" && len(d) != 0:
				t.Errorf("%s %s: a clone changes this, yet it is named: %v", how, dotted, d)
			case !allowed[dotted] && len(d) == 0:
				t.Errorf("%s %s: not named", how, dotted)
			}
			checked++
		}
	}
	// The labels the scheduler matches actors by.
	l := clone.DeepCopy()
	l.SetLabels(map[string]string{"runtime": "go"})
	if d := CloneDiff(source, fleet.PoolOf(l), nil); len(d) == 0 {
		t.Error("changed labels not named")
	}
	t.Logf("%d mutations of %d fields", checked, len(paths))
}

// TestAStoredCloneIsReadBack feeds the clone's write back as a server that
// pruned its class would store it: the run stops, naming the class and
// step 1, instead of leaving a clone that serves the default class.
func TestAStoredCloneIsReadBack(t *testing.T) {
	source := richPool("microvm")
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, source)
	plans, err := PlanClonesFor(c, Images{Any: "new@sha256:" + strings.Repeat("b", 64)}, servedSchema(t, false))
	if err != nil {
		t.Fatal(err)
	}
	p := plans[0]
	if err := storedAsPlanned(p, p.Object); err != nil {
		t.Fatalf("a clone stored as planned is refused: %v", err)
	}
	pruned := p.Object.DeepCopy()
	unstructured.RemoveNestedField(pruned.Object, "spec", "sandboxClasses")
	err = storedAsPlanned(p, pruned)
	if err == nil || !strings.Contains(err.Error(), "sandbox class: microvm in the source, gvisor in the clone") ||
		!strings.Contains(err.Error(), "step 1") {
		t.Fatalf("a clone stored without its class: %v", err)
	}
	mirrored := p.Object.DeepCopy()
	_ = unstructured.SetNestedField(mirrored.Object, "mirror.example/ateom@sha256:"+strings.Repeat("c", 64), "spec", "workerImage")
	if err := storedAsPlanned(p, mirrored); err == nil || !strings.Contains(err.Error(), "planned") {
		t.Fatalf("a clone stored with another image: %v", err)
	}
}
