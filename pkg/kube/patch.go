package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// NodeChange is a set of label, annotation and unschedulable changes applied
// to a node in one patch. A nil map value deletes the key.
type NodeChange struct {
	Labels        map[string]*string
	Annotations   map[string]*string
	Unschedulable *bool
}

// Empty reports whether the change does nothing.
func (c NodeChange) Empty() bool {
	return len(c.Labels) == 0 && len(c.Annotations) == 0 && c.Unschedulable == nil
}

// With is c and o in one change; o's value wins for a key both set.
func (c NodeChange) With(o NodeChange) NodeChange {
	merge := func(a, b map[string]*string) map[string]*string {
		if len(a)+len(b) == 0 {
			return nil
		}
		out := make(map[string]*string, len(a)+len(b))
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	out := NodeChange{Labels: merge(c.Labels, o.Labels), Annotations: merge(c.Annotations, o.Annotations),
		Unschedulable: c.Unschedulable}
	if o.Unschedulable != nil {
		out.Unschedulable = o.Unschedulable
	}
	return out
}

// AppliedTo is a copy of n with c applied: what a step's Done would see
// once c is in.
func (c NodeChange) AppliedTo(n *corev1.Node) *corev1.Node {
	out := n.DeepCopy()
	apply := func(m *map[string]string, want map[string]*string) {
		for k, v := range want {
			switch {
			case v == nil:
				delete(*m, k)
			case *m == nil:
				*m = map[string]string{k: *v}
			default:
				(*m)[k] = *v
			}
		}
	}
	apply(&out.Labels, c.Labels)
	apply(&out.Annotations, c.Annotations)
	if c.Unschedulable != nil {
		out.Spec.Unschedulable = *c.Unschedulable
	}
	return out
}

// NoOpOn reports whether applying c to n would change nothing.
func (c NodeChange) NoOpOn(n *corev1.Node) bool {
	same := func(cur map[string]string, want map[string]*string) bool {
		for k, v := range want {
			old, ok := cur[k]
			if v == nil && ok || v != nil && (!ok || old != *v) {
				return false
			}
		}
		return true
	}
	return same(n.Labels, c.Labels) && same(n.Annotations, c.Annotations) &&
		(c.Unschedulable == nil || *c.Unschedulable == n.Spec.Unschedulable)
}

// PatchNode applies change to the node as it was at n.ResourceVersion: the
// patch carries that resourceVersion, so a concurrent writer makes it fail
// with a Conflict instead of being silently overwritten. Returns the updated
// node. A change that is already in effect is not sent.
func PatchNode(ctx context.Context, cs kubernetes.Interface, n *corev1.Node, change NodeChange) (*corev1.Node, error) {
	if change.NoOpOn(n) {
		return n, nil
	}
	meta := map[string]any{"resourceVersion": n.ResourceVersion}
	if len(change.Labels) > 0 {
		meta["labels"] = change.Labels
	}
	if len(change.Annotations) > 0 {
		meta["annotations"] = change.Annotations
	}
	body := map[string]any{"metadata": meta}
	if change.Unschedulable != nil {
		body["spec"] = map[string]any{"unschedulable": *change.Unschedulable}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	out, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch node %s: %w", n.Name, err)
	}
	return out, nil
}

// UpdateNode reads the node, lets mutate compute a change from it and
// applies it with PatchNode, retrying on conflicts with a fresh read. mutate
// may return an empty change (nothing to do) or an error (stop).
func UpdateNode(ctx context.Context, cs kubernetes.Interface, name string,
	mutate func(*corev1.Node) (NodeChange, error)) (*corev1.Node, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return UpdateNodeFrom(ctx, cs, n, mutate)
}

// UpdateNodeFrom is UpdateNode starting from a node the caller just read
// (a runbook's observed facts): no read is spent unless someone wrote the
// node since, which the resourceVersion precondition detects.
func UpdateNodeFrom(ctx context.Context, cs kubernetes.Interface, n *corev1.Node,
	mutate func(*corev1.Node) (NodeChange, error)) (*corev1.Node, error) {
	var out *corev1.Node
	cur, stale := n, false
	err := RetryOnConflict(ctx, func() error {
		if stale {
			fresh, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		stale = true // a second attempt follows a conflict
		change, err := mutate(cur)
		if err != nil || change.Empty() {
			out = cur
			return err
		}
		out, err = PatchNode(ctx, cs, cur, change)
		return err
	})
	return out, err
}

// SetNodeKeys writes labels and annotations rollbook owns (nil deletes), and
// spec.unschedulable when set, with a merge patch of just those keys and no
// resourceVersion: nothing a concurrent writer did can be lost.
func SetNodeKeys(ctx context.Context, cs kubernetes.Interface, node string, change NodeChange) (*corev1.Node, error) {
	meta := map[string]any{}
	if len(change.Labels) > 0 {
		meta["labels"] = change.Labels
	}
	if len(change.Annotations) > 0 {
		meta["annotations"] = change.Annotations
	}
	patch := map[string]any{"metadata": meta}
	if change.Unschedulable != nil {
		patch["spec"] = map[string]any{"unschedulable": *change.Unschedulable}
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	out, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch node %s: %w", node, err)
	}
	return out, nil
}

// NodeKeys names the labels and annotations a change was decided from.
type NodeKeys struct {
	Labels, Annotations []string
	// Unschedulable: spec.unschedulable too (a cordon decided from it).
	Unschedulable bool
}

// UpdateNodeKeysFrom is UpdateNodeFrom with a narrower precondition: the
// keys the change was decided from (reads) must still hold what n shows,
// checked by the API server in the same request (JSON patch test
// operations). A write by anyone to anything else — the node controller's
// unschedulable taint right after a cordon, a status update — then costs
// nothing, where a resourceVersion precondition costs a conflict, a read
// and a second patch. When the test fails (someone changed a key read), it
// falls back to UpdateNode: a fresh read and the change decided again.
func UpdateNodeKeysFrom(ctx context.Context, cs kubernetes.Interface, n *corev1.Node, reads NodeKeys,
	mutate func(*corev1.Node) (NodeChange, error)) (*corev1.Node, error) {
	change, err := mutate(n)
	if err != nil {
		return n, err
	}
	if change.Empty() || change.NoOpOn(n) {
		return n, nil
	}
	body, err := json.Marshal(testedPatch(n, reads, change))
	if err != nil {
		return nil, err
	}
	out, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	if apierrors.IsInvalid(err) { // a test failed (or a map is missing): decide again from a fresh read
		return UpdateNode(ctx, cs, n.Name, mutate)
	}
	if err != nil {
		return nil, fmt.Errorf("patch node %s: %w", n.Name, err)
	}
	return out, nil
}

type jsonPatchOp struct {
	Op    string  `json:"op"`
	Path  string  `json:"path"`
	Value *string `json:"value"` // null tests that a key is absent
}

// testedPatch is change as JSON patch operations on n, preceded by a test
// of each key in reads.
func testedPatch(n *corev1.Node, reads NodeKeys, change NodeChange) []any {
	var ops []any
	test := func(prefix string, m map[string]string, keys []string) {
		for _, k := range keys {
			op := jsonPatchOp{Op: "test", Path: prefix + JSONPointerEscape(k)}
			if v, ok := m[k]; ok {
				op.Value = &v
			}
			ops = append(ops, op)
		}
	}
	test("/metadata/labels/", n.Labels, reads.Labels)
	test("/metadata/annotations/", n.Annotations, reads.Annotations)
	if reads.Unschedulable {
		op := map[string]any{"op": "test", "path": "/spec/unschedulable", "value": nil} // false is omitted: absent
		if n.Spec.Unschedulable {
			op["value"] = true
		}
		ops = append(ops, op)
	}
	set := func(prefix string, m map[string]string, want map[string]*string) {
		for k, v := range want {
			path := prefix + JSONPointerEscape(k)
			_, ok := m[k]
			switch {
			case v == nil && ok:
				ops = append(ops, map[string]string{"op": "remove", "path": path})
			case v == nil: // already absent: make sure it still is
				ops = append(ops, jsonPatchOp{Op: "test", Path: path})
			default:
				ops = append(ops, jsonPatchOp{Op: "add", Path: path, Value: v})
			}
		}
	}
	set("/metadata/labels/", n.Labels, change.Labels)
	set("/metadata/annotations/", n.Annotations, change.Annotations)
	if change.Unschedulable != nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/unschedulable", "value": *change.Unschedulable})
	}
	return ops
}

// JSONPointerEscape escapes a map key for a JSON pointer (RFC 6901), for
// the paths of a JSON patch.
func JSONPointerEscape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
