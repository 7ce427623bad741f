package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// tableJSON asks the API server for a list as a Table: the columns kubectl
// get prints, computed by the server. The server serves Tables in JSON
// only (protobuf is refused with 406).
const tableJSON = "application/json;as=Table;g=meta.k8s.io;v=v1"

// NodesNotReady returns the nodes whose Ready condition is False or
// Unknown (the server prints both NotReady; a node with no Ready condition
// yet prints Unknown and, as in NodeNotReadyReason, does not count), from
// the nodes' list as a
// Table of cells only: the Status column kubectl get nodes prints, about
// 190 bytes of JSON a node, where the conditions themselves are only in
// the full objects. A metadata-only list (what status reads the fleet
// with) does not carry them, and a pod's Ready condition follows its
// node's only when the node lifecycle controller saw a kubelet stop
// posting: a kubelet that posts NotReady itself leaves its pods Ready.
func NodesNotReady(ctx context.Context, cs kubernetes.Interface, selector string) (map[string]string, error) {
	out := map[string]string{}
	cont := ""
	for {
		req := cs.CoreV1().RESTClient().Get().Resource("nodes").SetHeader("Accept", tableJSON).
			Param("includeObject", string(metav1.IncludeNone)).Param("limit", fmt.Sprint(nodeListPage))
		if selector != "" {
			req = req.Param("labelSelector", selector)
		}
		if cont != "" {
			req = req.Param("continue", cont)
		}
		raw, err := req.Do(ctx).Raw()
		if err != nil {
			return nil, fmt.Errorf("list nodes' status: %w", serversWords(ctx, cs, selector, err))
		}
		var t metav1.Table
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("list nodes' status: %w", err)
		}
		name, status := -1, -1
		for i, c := range t.ColumnDefinitions {
			switch c.Name {
			case "Name":
				name = i
			case "Status":
				status = i
			}
		}
		if name < 0 || status < 0 {
			return nil, fmt.Errorf("list nodes' status: the server's table has no Name and Status columns")
		}
		for _, r := range t.Rows {
			if len(r.Cells) <= max(name, status) {
				continue
			}
			n, _ := r.Cells[name].(string)
			st, _ := r.Cells[status].(string)
			// "Ready", "NotReady" or "Unknown", then ",SchedulingDisabled"
			// for a cordoned node (the printer in pkg/printers/internalversion).
			if ready, _, _ := strings.Cut(st, ","); n != "" && ready == "NotReady" {
				out[n] = "the kubelet or the node controller reports Ready not True"
			}
		}
		if cont = t.Continue; cont == "" {
			return out, nil
		}
	}
}

// serversWords is err as the server words it. A refused Table request's
// Status is not decoded (the client asked for a Table), so a 403 reads
// "unknown (get nodes)"; the same list asked plainly (one node) brings the
// server's message back: who may not list what. Asked only on failure.
func serversWords(ctx context.Context, cs kubernetes.Interface, selector string, err error) error {
	if _, plain := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1}); plain != nil {
		return plain
	}
	return err
}
