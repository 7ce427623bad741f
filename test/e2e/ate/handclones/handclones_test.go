//go:build e2e

// Package handclones checks that OLD and NEW are read from what says so,
// not from a count of pins: pools a person cloned by hand carry no
// rollbook.dev/cloned-from, are pinned to NEW and may outnumber the pools
// on OLD. The roll then still moves nodes to NEW.
package handclones

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet"}) }

func TestClonesWithoutTheirAnnotationKeepOldAndNew(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 10*time.Minute)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)

	// The clones as a person makes them by hand: no annotation. And one more
	// pool pinned to NEW that is nobody's clone, so that NEW's pins
	// outnumber OLD's.
	pools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR)
	list, err := pools.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var extra *unstructured.Unstructured
	for i := range list.Items {
		p := &list.Items[i]
		if p.GetAnnotations()[fleet.AnnClonedFrom] == "" {
			continue
		}
		// A patch: the sim's pool controller writes the clone's status
		// meanwhile, and an update of the object listed would conflict.
		drop, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fleet.AnnClonedFrom: nil}}})
		updated, err := pools.Namespace(p.GetNamespace()).Patch(ctx, p.GetName(), types.MergePatchType, drop, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if extra == nil {
			extra = updated.DeepCopy()
		}
	}
	if extra == nil {
		t.Fatal("clone-pools made no clone")
	}
	extra.SetName("extra-on-new")
	extra.SetLabels(map[string]string{"team": "extra"})
	extra.SetResourceVersion("")
	extra.SetUID("")
	delete(extra.Object, "status")
	if _, err := pools.Namespace(extra.GetNamespace()).Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	s := atetest.Status(t, ctx)
	if s.Cluster.Old != atetest.OldV || s.Cluster.New != atetest.NewV {
		t.Fatalf("status reads OLD %q and NEW %q; the DaemonSets say OLD %s, NEW %s", s.Cluster.Old, s.Cluster.New, atetest.OldV, atetest.NewV)
	}
	atetest.MustRun(t, ctx, "roll", "next-node", "--wait")
	at := 0
	for n, v := range atetest.NodeLabels(t, ctx) {
		if v == atetest.NewV {
			at++
		} else if v != atetest.OldV {
			t.Errorf("node %s at %q", n, v)
		}
	}
	if at != 1 {
		t.Fatalf("one node should have moved to %s: %v", atetest.NewV, atetest.NodeLabels(t, ctx))
	}
	atetest.NoActorLost(t, ctx)
}
