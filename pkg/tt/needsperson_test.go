package tt

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

func needsPersonNode(name string, ann map[string]string, labels map[string]string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann, Labels: labels}}
}

func TestFailedFlashRefusedUntilAcknowledged(t *testing.T) {
	cfg := &FirmwareConfig{Readback: "19.9.0.0", RunID: "r1"}
	ch := needsPersonChange(cfg, &nodeagent.Result{}, "tt-flash could not write the SPI of 1 chip(s)")
	rec := *ch.Annotations[AnnFlashNeedsPerson]
	bad := map[string]string{AnnFlashNeedsPerson: rec}
	nodes := []corev1.Node{needsPersonNode("a", nil, nil), needsPersonNode("b", bad, nil),
		needsPersonNode("c", map[string]string{AnnFlashNeedsPerson: "not json"}, nil),
		needsPersonNode("d", bad, map[string]string{LabelFirmwareSkip: "true"})}
	tests := []struct {
		name    string
		ack     []string
		refused []string // nodes the error names
		usage   bool
	}{
		{"no acknowledgement", nil, []string{"b", "c"}, false},
		{"one acknowledged", []string{"b"}, []string{"c"}, false},
		{"both acknowledged", []string{"b", "c"}, nil, false},
		{"a node that needs nothing acknowledged", []string{"a", "b", "c"}, nil, false},
		{"an unselected node acknowledged", []string{"b", "c", "zz"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Selection{AcknowledgedFailedFlash: tc.ack}.checkNeedsPerson(nodes, FirmwareSkipReason)
			var np *NeedsPersonError
			var sel *SelectionError
			switch {
			case tc.usage:
				if !errors.As(err, &sel) {
					t.Fatalf("want a selection error, got %v", err)
				}
			case len(tc.refused) == 0:
				if err != nil {
					t.Fatalf("want no refusal, got %v", err)
				}
			default:
				if !errors.As(err, &np) || len(np.Details) != len(tc.refused) {
					t.Fatalf("want %v refused, got %v", tc.refused, err)
				}
				for i, n := range tc.refused {
					if !strings.HasPrefix(np.Details[i], n+": ") || !strings.Contains(np.Details[i], "--"+AcknowledgeFlag+"="+n) {
						t.Errorf("detail %d does not name %s and its acknowledgement: %s", i, n, np.Details[i])
					}
				}
			}
		})
	}
	if d := describeNeedsPerson("b", func() needsPersonRecord { r, _ := needsPersonOf(&nodes[1]); return r }()); !strings.Contains(d, "19.9.0.0") ||
		!strings.Contains(d, "run r1") || !strings.Contains(d, "support") {
		t.Errorf("the refusal must say what, when and what to do: %s", d)
	}
}

func TestAcknowledgedNamesAreValidated(t *testing.T) {
	for _, n := range []string{"", "Node_1", "a b", strings.Repeat("a", 254), "-a"} {
		if err := (Selection{AcknowledgedFailedFlash: []string{n}}).Validate(); err == nil {
			t.Errorf("--%s %q accepted", AcknowledgeFlag, n)
		}
	}
}

func TestStatusShowsANodeThatNeedsAPerson(t *testing.T) {
	cfg := &FirmwareConfig{Readback: "19.9.0.0", RunID: "r1"}
	ch := needsPersonChange(cfg, nil, "x")
	n := needsPersonNode("b", map[string]string{AnnFlashNeedsPerson: *ch.Annotations[AnnFlashNeedsPerson]}, nil)
	r := nodeStatus(&n, nil)
	if r.State != "needs a person" || !strings.Contains(r.Why, "--"+AcknowledgeFlag+"=b") {
		t.Fatalf("status: %q %q", r.State, r.Why)
	}
}
