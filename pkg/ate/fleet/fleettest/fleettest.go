// Package fleettest builds read models of a fleet by hand, for the tests
// of every ate layer.
package fleettest

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

// Pool is a WorkerPool in namespace ns pinned to pin, with labels and the
// template's resource limits, as the cluster read shows it.
func Pool(name, pin string, labels map[string]string, limits map[string]any) fleet.Pool {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ate.dev/v1alpha1", "kind": "WorkerPool",
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"spec": map[string]any{"replicas": int64(2), "workerImage": "old@sha256:" + strings.Repeat("a", 64), "sandboxClass": "gvisor",
			"template": map[string]any{"nodeSelector": map[string]any{fleet.VersionLabel: pin},
				"resources": map[string]any{"limits": limits}}},
	}}
	u.SetLabels(labels)
	return fleet.PoolOf(u)
}

// Cluster is the read model of atelets, the nodes n0, n1 and n2 at the
// versions nodes gives (a node left out does not exist) and pools, with
// OLD, NEW and the problems inferred as a read infers them.
func Cluster(atelets []fleet.Atelet, nodes map[string]string, pools ...fleet.Pool) *fleet.Cluster {
	c := &fleet.Cluster{Atelets: atelets, Pools: pools}
	for _, n := range []string{"n0", "n1", "n2"} {
		if v, ok := nodes[n]; ok {
			c.Nodes = append(c.Nodes, fleet.NodeInfo{Name: n, Version: v})
		}
	}
	c.Infer()
	return c
}

// TwoAtelets are versioned atelet DaemonSets at v1 (OLD) and v2 (NEW).
var TwoAtelets = []fleet.Atelet{{Name: "atelet-v1", Version: "v1", Versioned: true},
	{Name: "atelet-v2", Version: "v2", Versioned: true}}
