package ate

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rollbook/rollbook/pkg/kube"
)

func flipNodeFixture(cordonBy string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{VersionLabel: "v1"},
		Annotations: map[string]string{AnnMovingTo: "v2", AnnResidents: "a/x"}}}
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

// The flip's one patch: label, our cordon lifted and the mark removed
// together; a foreign cordon stays; no cordon at all, no flip.
func TestFlipPatch(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		cordonBy  string // "-": not cordoned; "": cordoned by someone else
		look      string // the cordon as the second look saw it
		wantErr   string
		wantLift  bool
		wantCalls int
	}{
		{name: "ours", cordonBy: CordonOwner, look: CordonOwner, wantLift: true, wantCalls: 1},
		{name: "foreign", cordonBy: "", look: "", wantCalls: 2}, // read, merge patch
		{name: "lifted since the look", cordonBy: "-", look: CordonOwner, wantErr: "cordon was lifted", wantCalls: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewSimpleClientset(flipNodeFixture(tc.cordonBy))
			calls := 0
			cs.PrependReactor("*", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				return false, nil, nil
			})
			n, lifted, err := flipPatch(ctx, cs, flipNodeFixture(tc.look), "v2")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				got, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
				if got.Labels[VersionLabel] != "v1" {
					t.Fatalf("flipped without the cordon: %v", got.Labels)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if calls != tc.wantCalls || lifted != tc.wantLift {
				t.Errorf("%d call(s), lifted %v; want %d, %v", calls, lifted, tc.wantCalls, tc.wantLift)
			}
			_, moving := n.Annotations[AnnMovingTo]
			_, seen := n.Annotations[AnnResidents]
			if n.Labels[VersionLabel] != "v2" || moving || seen {
				t.Errorf("label %q, marks %v %v after the flip", n.Labels[VersionLabel], moving, seen)
			}
			if st := kube.CordonStateOf(n); st.Cordoned != !tc.wantLift || (tc.wantLift && n.Annotations[kube.AnnCordonedBy] != "") {
				t.Errorf("cordon after the flip: %+v %v", st, n.Annotations)
			}
		})
	}
}
