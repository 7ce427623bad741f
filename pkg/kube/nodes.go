package kube

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/pager"
)

// nodeListPage keeps each list response a few MB. client-go reads a whole
// response into a growing buffer and the protobuf envelope copies it again,
// so one 5,000-node page of nodes that carry rollbook's records held ~18 MB
// twice at once: pages of 1,000 cut status's peak memory by a third and
// made it faster, not slower (docs/performance.md).
const nodeListPage = 1000

// nodePageBytes is what a metadata page after the first may hold: as many
// nodes as the first page's weigh that much. Light nodes (no records) then
// come in fewer round trips, each a fixed cost a small fleet's list feels;
// heavy ones stay near nodeListPage.
const nodePageBytes = 4 << 20

// nextNodePage sizes the next metadata page from the weight of page (its
// managedFields still in: the server sends them).
func nextNodePage(page []metav1.PartialObjectMetadata) int64 {
	if len(page) == 0 {
		return nodeListPage
	}
	size := 0
	for i := range page {
		size += page[i].Size()
	}
	per := max(1, size/len(page))
	return int64(min(max(nodePageBytes/per, nodeListPage), 10*nodeListPage))
}

var nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// ListNodesLight returns the nodes matching selector with what a fleet
// status needs and nothing else: metadata (labels, annotations) for every
// node, from a metadata-only list that costs a fraction of full Nodes to
// send and decode, plus spec.unschedulable, learned from a second list of
// only the cordoned nodes (a field selector, so its cost grows with what
// the roll changed, not with the fleet). Cordoned nodes come back whole;
// the others carry no spec but Unschedulable=false and no status. With a
// nil md, it falls back to listing full Nodes.
func ListNodesLight(ctx context.Context, md metadata.Interface, cs kubernetes.Interface, selector string) ([]corev1.Node, error) {
	return ListNodesLightThen(ctx, md, cs, selector, nil)
}

// ListNodesLightThen is ListNodesLight that hands the cordoned nodes to
// then as soon as they are read, while the fleet's metadata list may still
// be in flight: reads that only the cordoned nodes (what a roll changed)
// need start at once instead of after the fleet's list. An error from then
// fails the list.
func ListNodesLightThen(ctx context.Context, md metadata.Interface, cs kubernetes.Interface, selector string,
	then func(ctx context.Context, cordoned []corev1.Node) error) ([]corev1.Node, error) {
	if md == nil {
		all, err := listNodes(ctx, cs, metav1.ListOptions{LabelSelector: selector})
		if err != nil || then == nil {
			return all, err
		}
		var cordoned []corev1.Node
		for _, n := range all {
			if n.Spec.Unschedulable {
				cordoned = append(cordoned, n)
			}
		}
		return all, then(ctx, cordoned)
	}
	var metas []metav1.PartialObjectMetadata
	var cordoned []corev1.Node
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		metas, err = listNodeMetas(gctx, md, selector, nodeListPage)
		return err
	})
	g.Go(func() error {
		var err error
		cordoned, err = listNodes(gctx, cs, metav1.ListOptions{LabelSelector: selector, FieldSelector: "spec.unschedulable=true"})
		if err != nil || then == nil {
			return err
		}
		return then(gctx, cordoned)
	})
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	full := make(map[string]*corev1.Node, len(cordoned))
	for i := range cordoned {
		full[cordoned[i].Name] = &cordoned[i]
	}
	out := make([]corev1.Node, len(metas))
	for i := range metas {
		if n, ok := full[metas[i].Name]; ok {
			out[i] = *n
			continue
		}
		out[i].ObjectMeta = metas[i].ObjectMeta
	}
	return out, nil
}

// listNodeMetas lists the nodes' metadata, first asking for a page of
// first nodes, then for pages sized by what the first weighed.
func listNodeMetas(ctx context.Context, md metadata.Interface, selector string, first int64) ([]metav1.PartialObjectMetadata, error) {
	// Pages by hand, not through a pager: the pager copies every item
	// through a channel, which at 5,000 nodes is a visible share of status.
	var metas []metav1.PartialObjectMetadata
	opts := metav1.ListOptions{LabelSelector: selector, Limit: first}
	for {
		l, err := md.Resource(nodesGVR).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		opts.Limit = nextNodePage(l.Items)
		for i := range l.Items {
			// The server sends every node's managedFields; nothing here
			// reads them, and dropped now they are collected before the
			// rest of a status (an inventory) is read.
			l.Items[i].ManagedFields = nil
		}
		if metas == nil {
			metas = l.Items
		} else {
			metas = append(metas, l.Items...)
		}
		if l.Continue == "" {
			return metas, nil
		}
		opts.Continue = l.Continue
	}
}

func listNodes(ctx context.Context, cs kubernetes.Interface, opts metav1.ListOptions) ([]corev1.Node, error) {
	var out []corev1.Node
	p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return cs.CoreV1().Nodes().List(ctx, o)
	})
	opts.Limit = nodeListPage
	err := p.EachListItem(ctx, opts, func(o runtime.Object) error {
		out = append(out, *o.(*corev1.Node))
		return nil
	})
	return out, err
}
