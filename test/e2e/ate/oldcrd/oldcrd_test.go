//go:build e2e

// Package oldcrd clones the pools under the WorkerPool CRD of a release
// before spec.sandboxClasses (runbook step 1 not applied yet). A field a
// structural schema does not declare is pruned on every write, so a clone
// that names its class in the newer field is stored with no class and
// serves the default one: the clone must name it as the served schema
// declares, be read back and compared with its source, and a clone whose
// class differs from its source's must stop the roll.
package oldcrd

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet", Env: []string{"ROLLBOOK_SIM_ATE_CRD=old"}})
}

// pools are the WorkerPools by key, as stored.
func pools(t *testing.T) map[string]fleet.Pool {
	t.Helper()
	l, err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fleet.Pool{}
	for i := range l.Items {
		p := fleet.PoolOf(&l.Items[i])
		out[p.Key()] = p
	}
	return out
}

func classOf(p fleet.Pool) string {
	if p.SandboxClass == "" {
		return "gvisor (no class: the default)"
	}
	return p.SandboxClass
}

func TestClonesKeepTheirClassUnderTheServedSchema(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	all := pools(t)
	clones := 0
	for _, p := range all {
		if p.ClonedFrom == "" {
			continue
		}
		clones++
		src, ok := all[p.ClonedFrom]
		if !ok {
			t.Fatalf("clone %s names a source %s that does not exist", p.Key(), p.ClonedFrom)
		}
		if classOf(p) != classOf(src) {
			t.Errorf("clone %s serves sandbox class %s, its source %s serves %s", p.Key(), classOf(p), src.Key(), classOf(src))
		}
	}
	if clones != 3 {
		t.Fatalf("%d clones, want the fleet's 3", clones)
	}

	// The microvm clone's class changed by hand (what a class lost on
	// write falls back to): the roll must not move a node onto it.
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"sandboxClass": "gvisor"}})
	if _, err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-batch").Patch(ctx, "python-small-v0-3-0",
		types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	out := atetest.ExpectRefused(t, ctx, "sandbox class", "roll", "next-node")
	if !strings.Contains(out, "ate-batch/python-small-v0-3-0") || !strings.Contains(out, "step 1") {
		t.Errorf("the refusal should name the clone and step 1")
	}
	// Put right (deleted and cloned again), the roll goes on; step 1
	// applied first, the new clone names its class as the new schema does.
	if err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-batch").Delete(ctx, "python-small-v0-3-0",
		metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sim, err := simtest.SimBinary()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sim, "ate-setup", "apply-crds", "--dir", c.Dir).CombinedOutput(); err != nil {
		t.Fatalf("apply the new CRDs: %v\n%s", err, out)
	}
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	if p := pools(t)["ate-batch/python-small-v0-3-0"]; p.SandboxClass != "microvm" {
		t.Fatalf("the clone made under the new schema serves %s", classOf(p))
	}
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	atetest.NoActorLost(t, ctx)
}
