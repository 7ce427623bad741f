package simtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// Snapshot is what bad input must never change: nodes (labels, annotations,
// cordon), live pods, DaemonSets, rollbook's Leases, ConfigMaps, and the
// spec and generation of every object of extra (e.g. WorkerPools; their
// status moves on its own). Compare two snapshots as strings.
func (c *Cluster) Snapshot(t testing.TB, extra ...schema.GroupVersionResource) string {
	t.Helper()
	ctx := context.Background()
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		ann := map[string]string{}
		for k, v := range n.Annotations {
			if k != "node.alpha.kubernetes.io/ttl" { // the ttl controller's, set on a new node at any time
				ann[k] = v
			}
		}
		add("node %s %v %v %v", n.Name, n.Labels, ann, n.Spec.Unschedulable)
	}
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			add("pod %s/%s %s %s", p.Namespace, p.Name, p.UID, p.Spec.NodeName)
		}
	}
	dss, err := c.Client.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dss.Items {
		add("daemonset %s/%s %s %d", d.Namespace, d.Name, d.UID, d.Generation)
	}
	leases, err := c.Client.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "rollbook-") {
			add("lease %s/%s %v %q", l.Namespace, l.Name, l.Annotations, ptr.Deref(l.Spec.HolderIdentity, ""))
		}
	}
	cms, err := c.Client.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		add("configmap %s/%s %s", cm.Namespace, cm.Name, cm.ResourceVersion)
	}
	if len(extra) > 0 {
		dyn, err := dynamic.NewForConfig(c.RESTConfig)
		if err != nil {
			t.Fatal(err)
		}
		for _, gvr := range extra {
			l, err := dyn.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list %s: %v", gvr.Resource, err)
			}
			for _, u := range l.Items {
				spec, _, _ := unstructured.NestedMap(u.Object, "spec")
				add("%s %s/%s %s %d %v %v", gvr.Resource, u.GetNamespace(), u.GetName(), u.GetUID(), u.GetGeneration(), u.GetLabels(), spec)
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
