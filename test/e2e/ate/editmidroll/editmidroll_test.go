//go:build e2e

// Package editmidroll checks the runbook's second warning: a serving pool
// edited or scaled mid-roll. clone-pools made each clone equal to its
// source but for image and pin; the next node does not move while they
// differ, and moves once they are alike again.
package editmidroll

import (
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"}) }

func TestAServingPoolScaledMidRollStopsTheNextNode(t *testing.T) {
	c := simtest.Get(t)
	// The test plays the person who scales a serving pool: the sim records
	// that, and nothing else may be recorded.
	before, err := c.Violations()
	if err != nil {
		t.Fatal(err)
	}
	edited := c.ExpectViolation(t, "serving-pool-edited")
	defer func() {
		after, _ := c.Violations()
		for _, v := range after[len(before):] {
			if !strings.Contains(v, `"rule":"serving-pool-edited","object":"workerpool/ate-workers/python-small"`) {
				t.Errorf("sim invariant violated: %s", v)
			}
		}
		edited()
	}()
	ctx := simtest.Context(t, 8*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")

	pools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers")
	scale := func(n int) {
		t.Helper()
		patch := []byte(`{"spec":{"replicas":` + strconv.Itoa(n) + `}}`)
		if _, err := pools.Patch(ctx, "python-small", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	src, err := pools.Get(ctx, "python-small", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	was, _, _ := unstructured.NestedInt64(src.Object, "spec", "replicas")
	scale(int(was) - 1)
	atetest.ExpectRefused(t, ctx, "no serving pool edited or scaled since its clone was made", "roll", "next-node")

	scale(int(was))
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	atetest.NoActorLost(t, ctx)
}
