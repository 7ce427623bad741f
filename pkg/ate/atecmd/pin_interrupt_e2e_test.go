package atecmd

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/cutoff"
	"github.com/rollbook/rollbook/internal/recordtest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// A pin the server applied while the run was being interrupted is still
// recorded: the re-run finds the pool pinned and has nothing left to say.
func TestPinInterruptedMidRequestIsStillRecorded(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	pools := dyn(t).Resource(ate.WorkerPoolGVR).Namespace("ate-workers")
	p := pool("pin-interrupted", nil, 0)
	if _, err := pools.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pools.Delete(context.Background(), p.GetName(), metav1.DeleteOptions{}) }()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	cut, err := dynamic.NewForConfig(cutoff.Config(c.RESTConfig,
		cutoff.Method(http.MethodPatch, "/workerpools/"+p.GetName()), stop))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordtest.Recorder{}
	rb := ate.PinPoolsRunbook(c.Client, cut, client(t, ctx), rec)
	res := runbook.Run(runCtx, rb, []runbook.Target{runbook.ScopeTarget{Scope: "pools"}}, runbook.Options{RunID: "pin-test"})
	if res.Outcome == runbook.OutcomeDone {
		t.Fatalf("the run was interrupted mid-pin but reports %s", res.Outcome)
	}
	got, err := pools.Get(ctx, p.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pin, _, _ := unstructured.NestedString(got.Object, "spec", "template", "nodeSelector", ate.VersionLabel); pin != oldV {
		t.Fatalf("the server did not apply the pin (pin %q)", pin)
	}
	if n := rec.Count("PoolPinned"); n != 1 {
		t.Fatalf("%d PoolPinned records for a pin the server applied, want 1: %q", n, rec.All())
	}
}
