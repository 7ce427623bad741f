package tt

import (
	"context"
	"fmt"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// FirmwarePolicyResource is tt-k8s-driver-manager's firmware operator's
// custom resource (ttfwp, cluster-scoped): each one flashes the nodes it
// selects with one-shot Jobs.
var FirmwarePolicyResource = schema.GroupVersionResource{Group: "firmware.tenstorrent.com", Version: "v1alpha1",
	Resource: "tenstorrentfirmwarepolicies"}

// The labels the firmware operator puts on its flash Jobs and their pods.
const (
	FirmwareJobNodeLabel = "firmware.tenstorrent.com/node"
	FirmwareJobCRLabel   = "firmware.tenstorrent.com/cr"
)

// OperatorClaims says, per node name, why another manager may change the
// node's firmware while rollbook works on it: a TenstorrentFirmwarePolicy
// that selects it, or an unfinished flash Job of that operator on it.
// Read once per run, before any node is probed.
type OperatorClaims map[string][]string

// ReadFirmwareOperatorClaims reads the firmware operator's policies and
// Jobs for nodes. Without its CRD there are no policies (not an error).
func ReadFirmwareOperatorClaims(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface,
	nodes []corev1.Node) (OperatorClaims, error) {
	out := OperatorClaims{}
	l, err := dyn.Resource(FirmwarePolicyResource).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err): // the CRD is not installed
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("cannot check for the firmware operator (listing %s is forbidden): %w", FirmwarePolicyResource.Resource, err)
	case err != nil:
		return nil, fmt.Errorf("list %s: %w", FirmwarePolicyResource.GroupResource(), err)
	default:
		for i := range l.Items {
			p := &l.Items[i]
			sel, why, err := firmwarePolicySelector(p)
			if err != nil {
				return nil, err
			}
			for j := range nodes {
				n := &nodes[j]
				if n.Labels[LabelFirmwareSkip] == "true" || !sel.Matches(labels.Set(n.Labels)) {
					continue
				}
				state := ""
				if paused, _, _ := unstructured.NestedBool(p.Object, "spec", "paused"); paused {
					state = " (paused now; unpaused it flashes again)"
				}
				out[n.Name] = append(out[n.Name], fmt.Sprintf("TenstorrentFirmwarePolicy %s of the firmware operator selects this "+
					"node (%s)%s: its flash Jobs could flash the cards while rollbook does. Flash through the operator, or take the "+
					"node out of its selection (edit spec.nodeAffinity: kubectl edit ttfwp %s), or delete the policy",
					p.GetName(), why, state, p.GetName()))
			}
		}
	}
	jobs, err := cs.BatchV1().Jobs(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: FirmwareJobNodeLabel})
	if err != nil {
		return nil, fmt.Errorf("list the firmware operator's flash Jobs: %w", err)
	}
	want := map[string]bool{}
	for i := range nodes {
		want[nodes[i].Name] = true
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		node := j.Labels[FirmwareJobNodeLabel]
		if !want[node] || jobFinished(j) {
			continue
		}
		out[node] = append(out[node], fmt.Sprintf("flash Job %s/%s of the firmware operator (policy %s) has not finished on this "+
			"node: wait for it (kubectl -n %s get job %s), or delete it if it is stuck", j.Namespace, j.Name,
			orUnknown(j.Labels[FirmwareJobCRLabel]), j.Namespace, j.Name))
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out, nil
}

// firmwarePolicySelector is the policy's node selection: spec.nodeAffinity
// (a label selector), else the older spec.nodeSelector, ANDed with the NFD
// Tenstorrent label as the operator does.
func firmwarePolicySelector(p *unstructured.Unstructured) (labels.Selector, string, error) {
	field := "nodeAffinity"
	raw, ok, _ := unstructured.NestedMap(p.Object, "spec", field)
	if !ok {
		field = "nodeSelector"
		raw, ok, _ = unstructured.NestedMap(p.Object, "spec", field)
	}
	ls := &metav1.LabelSelector{}
	if ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, ls); err != nil {
			return nil, "", fmt.Errorf("TenstorrentFirmwarePolicy %s: spec.%s: %w", p.GetName(), field, err)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, "", fmt.Errorf("TenstorrentFirmwarePolicy %s: spec.%s: %w", p.GetName(), field, err)
	}
	why := "spec." + field + " " + sel.String()
	if !ok || sel.Empty() {
		why = "it selects every Tenstorrent node"
	}
	req, _ := labels.NewRequirement(LabelPCIPresent, "=", []string{"true"})
	return sel.Add(*req), why, nil
}

func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
