package node

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/internal/cutoff"
	"github.com/rollbook/rollbook/internal/httpcount"
	"github.com/rollbook/rollbook/internal/recordtest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func flipNodeFixture(cordonBy string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "flip-n1", Labels: map[string]string{fleet.VersionLabel: "v1"},
		Annotations: map[string]string{fleet.AnnMovingTo: "v2", AnnResidents: "a/x"}}}
	if cordonBy != "-" {
		n.Spec.Unschedulable = true
		if cordonBy != "" {
			n.Annotations[kube.AnnCordonedBy] = cordonBy
			n.Annotations[kube.AnnCordonedAt] = "2026-01-01T00:00:00Z"
			n.Annotations[kube.AnnCordonRun] = "run"
		}
	}
	return n
}

// The flip's one patch, against the real API server: label, our cordon
// lifted and the mark removed together; a foreign cordon stays; no cordon
// at all, no flip. Requests are counted at the transport.
func TestFlipPatch(t *testing.T) {
	simtest.SkipShort(t)
	c, err := simtest.Start(simtest.Options{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop) // after the violations check registered next
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	cs, calls := httpcount.Client(c.RESTConfig)
	for _, tc := range []struct {
		name      string
		cordonBy  string // "-": not cordoned; "": cordoned by someone else
		look      string // the cordon as the second look saw it
		wantErr   string
		wantLift  bool
		wantCalls int32 // 0: not counted
	}{
		{name: "ours", cordonBy: CordonOwner, look: CordonOwner, wantLift: true, wantCalls: 1},
		// The fallback reads and patches with a resourceVersion precondition:
		// 2 requests, or 4 when the node controller wrote the new node in
		// between (it does, on the real control plane), so not counted.
		{name: "foreign", cordonBy: "", look: ""},
		{name: "lifted since the look", cordonBy: "-", look: CordonOwner, wantErr: "cordon was lifted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			created, err := c.Client.CoreV1().Nodes().Create(ctx, flipNodeFixture(tc.cordonBy), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = c.Client.CoreV1().Nodes().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
			}()
			look := flipNodeFixture(tc.look)
			look.ResourceVersion = created.ResourceVersion
			calls.Store(0)
			n, lifted, err := flipPatch(ctx, cs, look, "v2")
			if got := calls.Load(); tc.wantCalls > 0 && got != tc.wantCalls {
				t.Errorf("%d request(s), want %d", got, tc.wantCalls)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				got, _ := c.Client.CoreV1().Nodes().Get(ctx, created.Name, metav1.GetOptions{})
				if got.Labels[fleet.VersionLabel] != "v1" {
					t.Fatalf("flipped without the cordon: %v", got.Labels)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lifted != tc.wantLift {
				t.Errorf("lifted %v; want %v", lifted, tc.wantLift)
			}
			_, moving := n.Annotations[fleet.AnnMovingTo]
			_, seen := n.Annotations[AnnResidents]
			if n.Labels[fleet.VersionLabel] != "v2" || moving || seen || n.Annotations[fleet.AnnVerifyPending] != "v2" {
				t.Errorf("label %q, marks %v %v, %s %q after the flip", n.Labels[fleet.VersionLabel], moving, seen, fleet.AnnVerifyPending,
					n.Annotations[fleet.AnnVerifyPending])
			}
			if st := kube.CordonStateOf(n); st.Cordoned != !tc.wantLift || (tc.wantLift && n.Annotations[kube.AnnCordonedBy] != "") {
				t.Errorf("cordon after the flip: %+v %v", st, n.Annotations)
			}
		})
	}
	// Interrupted while the server applies the flip: it is still recorded.
	t.Run("interrupted mid-patch", func(t *testing.T) {
		created, err := c.Client.CoreV1().Nodes().Create(ctx, flipNodeFixture(CordonOwner), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = c.Client.CoreV1().Nodes().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
		}()
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		cut := kubernetes.NewForConfigOrDie(cutoff.Config(c.RESTConfig, cutoff.Method(http.MethodPatch, "/nodes/"+created.Name), stop))
		_, _, err = flipPatch(runCtx, cut, created, "v2")
		if err == nil {
			t.Fatal("an interrupted flip should report its error")
		}
		rec := &recordtest.Recorder{}
		if recordFlipIfApplied(runCtx, err, cut, rec, created.Name, "v2", "flipped") == nil {
			t.Fatal("the error must be returned as it was")
		}
		if got, _ := c.Client.CoreV1().Nodes().Get(ctx, created.Name, metav1.GetOptions{}); got.Labels[fleet.VersionLabel] != "v2" {
			t.Fatalf("the server did not apply the flip: %v", got.Labels)
		}
		if rec.Count("SubstrateVersionFlipped") != 1 || len(rec.All()) != 1 {
			t.Fatalf("records %q for a flip the server applied, want one SubstrateVersionFlipped", rec.All())
		}
	})
}

// inventoryAPI answers Inventory with an empty inventory and counts the
// calls.
type inventoryAPI struct {
	API
	calls atomic.Int32
}

func (a *inventoryAPI) Inventory(context.Context) (*ateapi.Inventory, error) {
	a.calls.Add(1)
	return &ateapi.Inventory{}, nil
}

// ProbeMove: this API refuses nothing (the mark asks before it writes).
func (a *inventoryAPI) ProbeMove(context.Context, []string) ([]ateapi.Refusal, []string, error) {
	return nil, nil, nil
}

// The mark step's result is its own patch's response and the facts it
// decided on (annotations cannot show in the pods or the inventory): the
// engine's look after it makes no request. The mark step alone, through
// the engine: the first look (the node, its pods, one inventory) and the
// patch, nothing more.
func TestMarkStepCost(t *testing.T) {
	simtest.SkipShort(t)
	c, err := simtest.Start(simtest.Options{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, time.Minute)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mark-n1", Labels: map[string]string{fleet.VersionLabel: "v1"}}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs, calls := httpcount.Client(c.RESTConfig)
	api := &inventoryAPI{}
	o := newNodeObserver(cs, api, &Config{Sides: Sides{From: "v1", To: "v2", FirstNode: true}})
	rb := nodeRunbook(o, nopRecorder{})
	rb.Steps = rb.Steps[:1]
	if rb.Steps[0].ID != "ate.node.mark" {
		t.Fatalf("first step %s, want ate.node.mark", rb.Steps[0].ID)
	}
	res := runbook.Run(ctx, rb, []runbook.Target{runbook.NodeTarget{Client: o.cs, Node: node.Name}}, runbook.Options{RunID: "r"})
	if res.Outcome != runbook.OutcomeDone {
		t.Fatalf("outcome %s: %+v", res.Outcome, res.Targets)
	}
	if got, inv := calls.Load(), api.calls.Load(); got != 3 || inv != 1 {
		t.Errorf("%d request(s) and %d inventory read(s); want 3 (GET node, list pods, PATCH node) and 1", got, inv)
	}
	got, err := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[fleet.AnnMovingTo] != "v2" {
		t.Errorf("annotations %v; want %s=v2", got.Annotations, fleet.AnnMovingTo)
	}
}
