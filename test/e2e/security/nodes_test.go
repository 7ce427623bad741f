//go:build e2e

package security

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/internal/mutate"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

func patchNode(ctx context.Context, cs kubernetes.Interface, name string, patch map[string]any) error {
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, raw, metav1.PatchOptions{})
	return err
}

func labels(kv map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"labels": kv}}
}

func refusedBy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// The operator roles write only what the runbooks write on nodes; the
// labels the helper guard reads are the admin's.
func TestOperatorNodeWrites(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, 5*time.Minute)
	params := testParams()
	as := setup(t, ctx, c, params)
	const n = "kwok-node-1"
	allowed := map[string]map[string]any{
		"rollbook's own label":          labels(map[string]any{kube.AnnotationPrefix + "x": "1"}),
		"tt-kmd's version label":        labels(map[string]any{tt.LabelKMDVersion: "2.8.0"}),
		"the deploy gate":               labels(map[string]any{tt.DefaultDeployGate: "false"}),
		"Agent Substrate's version":     labels(map[string]any{install.ATEVersionLabel: "v9"}),
		"rollbook's annotation":         {"metadata": map[string]any{"annotations": map[string]any{kube.AnnotationPrefix + "y": "1"}}},
		"the cordon":                    {"spec": map[string]any{"unschedulable": true}},
		"the uncordon":                  {"spec": map[string]any{"unschedulable": nil}},
		"rollbook's own label, removed": labels(map[string]any{kube.AnnotationPrefix + "x": nil}),
	}
	for what, p := range allowed {
		if err := patchNode(ctx, as, n, p); err != nil {
			t.Errorf("the operator could not write %s: %v", what, err)
		}
	}
	refused := map[string]map[string]any{
		"the helper guard's label, removed":   labels(map[string]any{params.NodeLabel.Key: nil}),
		"the helper guard's label, changed":   labels(map[string]any{params.NodeLabel.Key: "false"}),
		"the control-plane role, added":       labels(map[string]any{kube.LabelControlPlane: ""}),
		"another label":                       labels(map[string]any{"example.com/team": "x"}),
		"a label under a look-alike prefix":   labels(map[string]any{"rollbook.dev.evil/x": "1"}),
		"another annotation":                  {"metadata": map[string]any{"annotations": map[string]any{"example.com/x": "1"}}},
		"a taint":                             {"spec": map[string]any{"taints": []any{map[string]any{"key": "x", "effect": "NoSchedule"}}}},
		"a finalizer":                         {"metadata": map[string]any{"finalizers": []any{"example.com/x"}}},
		"the provider ID":                     {"spec": map[string]any{"providerID": "evil://x"}},
		"the kubelet's label (hostname)":      labels(map[string]any{corev1.LabelHostname: "evil"}),
		"a label of the tt operator's (skip)": labels(map[string]any{tt.LabelDriverSkip: "true"}),
	}
	for what, p := range refused {
		if err := patchNode(ctx, as, n, p); !refusedBy(err, install.NodeWritesPolicyName) {
			t.Errorf("the operator wrote %s: %v", what, err)
		}
	}
	// The control-plane role cannot be stripped either.
	if err := patchNode(ctx, c.Client, "kwok-node-2", labels(map[string]any{kube.LabelControlPlane: ""})); err != nil {
		t.Fatal(err)
	}
	if err := patchNode(ctx, as, "kwok-node-2", labels(map[string]any{kube.LabelControlPlane: nil})); !refusedBy(err,
		install.NodeWritesPolicyName) {
		t.Errorf("the operator removed the control-plane role: %v", err)
	}
	if err := patchNode(ctx, c.Client, "kwok-node-2", labels(map[string]any{kube.LabelControlPlane: nil})); err != nil {
		t.Errorf("a cluster admin is not limited: %v", err)
	}

	// Every other field of the node, generated from its type: refused.
	node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tried, refusedN, noop int
	covered := map[string]bool{}
	for _, m := range mutate.Of(node, mutate.Options{Skip: []string{"apiVersion", "kind", "status.*", "status",
		"metadata.uid", "metadata.resourceVersion", "metadata.generation", "metadata.creationTimestamp",
		"metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds", "metadata.managedFields", "metadata.managedFields.*",
		"metadata.selfLink", "metadata.name", "metadata.namespace", "metadata.generateName", "spec.unschedulable",
		`metadata.labels["rollbook.dev/x"]`, `metadata.annotations["rollbook.dev/y"]`}}) {
		key := m.Boundary
		if key == "" {
			key = m.Path
		}
		for i := range min(len(m.Candidates), maxPerMutation) {
			if covered[key] {
				break
			}
			cur, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			mut := cur.DeepCopy()
			// The node is live (controllers change its taints): a candidate
			// generated from an earlier read may no longer apply.
			if err := m.Apply(mut, i); errors.Is(err, mutate.ErrNotApplicable) {
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			patch, err := nodePatch(cur, mut)
			if err != nil {
				t.Fatal(err)
			}
			if patch == nil {
				continue
			}
			tried++
			// The operator roles patch nodes (no update): as kubectl would.
			got, err := as.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, patch,
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case err == nil && sameNode(cur, got):
				noop++ // the server dropped the field (a disabled feature, a field it ignores): nothing changed
			case err == nil:
				if !isRollbooksKey(m.Path) {
					t.Errorf("the operator's node update with %s was ADMITTED", m.Describe(i))
				}
				covered[key] = true
			case refusedBy(err, install.NodeWritesPolicyName):
				refusedN++
				covered[key] = true
			}
		}
	}
	t.Logf("NODE MUTATIONS: %d updates tried, %d refused by the policy, %d the server dropped, %d fields covered", tried, refusedN,
		noop, len(covered))
}

// isRollbooksKey: a label or annotation the operator may write.
func isRollbooksKey(path string) bool {
	for _, k := range append([]string{kube.AnnotationPrefix, tt.DefaultDeployGate}, install.WritableNodeLabels...) {
		if strings.Contains(path, `["`+k) {
			return true
		}
	}
	return false
}

// nodePatch is the strategic merge patch from a to b; nil when they agree.
func nodePatch(a, b *corev1.Node) ([]byte, error) {
	ra, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	rb, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	p, err := strategicpatch.CreateTwoWayMergePatch(ra, rb, corev1.Node{})
	if err != nil || string(p) == "{}" {
		return nil, err
	}
	return p, nil
}

// sameNode: the server kept the node as it was (the write changed nothing
// it stores).
func sameNode(a, b *corev1.Node) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	for _, n := range []*corev1.Node{x, y} {
		n.ResourceVersion, n.ManagedFields, n.Generation = "", nil, 0
		n.Status = corev1.NodeStatus{}
	}
	return equality.Semantic.DeepEqual(x.ObjectMeta, y.ObjectMeta) && equality.Semantic.DeepEqual(x.Spec, y.Spec)
}
