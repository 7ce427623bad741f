package roll

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
)

func TestPlanClones(t *testing.T) {
	labels := map[string]string{"runtime": "python"}
	old := fleettest.Pool("counter-v1", "v1", labels, map[string]any{"cpu": "2"})
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, old)
	plans, err := PlanClones(c, Images{Any: "new@sha256:" + strings.Repeat("b", 64)})
	if err != nil || len(plans) != 1 {
		t.Fatalf("plans %v err %v", plans, err)
	}
	p := plans[0]
	got := fleet.PoolOf(p.Object)
	if p.Name != "counter-v2" || got.Pin != "v2" || got.Image != p.Image || got.Labels["runtime"] != "python" ||
		got.ClonedFrom != "ns/counter-v1" {
		t.Fatalf("clone: name %s %+v", p.Name, got)
	}
	// The served schema unknown, the clone names its class as its source
	// does: a field the source was stored with is one a write keeps.
	if class, _, _ := unstructured.NestedString(p.Object.Object, "spec", "sandboxClass"); class != "gvisor" {
		t.Fatalf("the clone's class was rewritten with the schema unknown: %v", p.Object.Object["spec"])
	}
	if p.Object.GetResourceVersion() != "" || p.Object.Object["status"] != nil {
		t.Fatal("clone copies server-owned fields")
	}
	if err := CheckLimits(p); err != nil {
		t.Fatalf("same limits refused: %v", err)
	}
	_ = unstructured.SetNestedField(p.Object.Object, "1", "spec", "template", "resources", "limits", "cpu")
	if err := CheckLimits(p); err == nil || !strings.Contains(err.Error(), "shrinks limit cpu") {
		t.Fatalf("a shrunk limit must be refused: %v", err)
	}
	// Once the clone exists (by annotation), nothing is planned.
	clone := fleet.PoolOf(plans[0].Object)
	c = fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, old, clone)
	if plans, _ := PlanClones(c, Images{Any: "x"}); len(plans) != 0 {
		t.Fatalf("planned a second clone: %v", plans)
	}
}

func TestValidateImageAndCloneName(t *testing.T) {
	for ref, ok := range map[string]bool{
		"reg.io/ateom:v2@sha256:" + strings.Repeat("0", 64): true,
		"reg.io/ateom@sha256:" + strings.Repeat("f", 64):    true,
		"reg.io/ateom:v2":           false,
		"reg.io/ateom@sha256:short": false,
		"reg.io/ateom:v2@sha256:" + strings.Repeat("0", 64) + "; rm -rf /": false,
	} {
		if err := ValidateImage(ref); (err == nil) != ok {
			t.Errorf("ValidateImage(%q) = %v", ref, err)
		}
	}
	for pool, want := range map[string]string{"counter-v2": "counter-v0-3-0", "python-small": "python-small-v0-3-0"} {
		if got := CloneName(pool, "v0.3.0"); got != want {
			t.Errorf("CloneName(%s) = %s, want %s", pool, got, want)
		}
	}
}
