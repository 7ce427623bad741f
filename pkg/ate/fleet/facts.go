package fleet

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
)

// The substrate facts the runbooks decide on, each written once. Pools are
// always matched by "namespace/name" (Pool.Key, Worker.PoolKey): the same
// pool name in two namespaces is two pools.

// PoolSet is the keys of pools as a set.
func PoolSet(pools []Pool) map[string]bool {
	m := map[string]bool{}
	for _, p := range pools {
		m[p.Key()] = true
	}
	return m
}

// ActorsBoundTo lists the actors bound to a worker of pools.
func ActorsBoundTo(inv *ateapi.Inventory, pools []Pool) []ateapi.Actor {
	set := PoolSet(pools)
	workers := map[string]bool{}
	for _, w := range inv.Workers {
		if set[w.PoolKey()] {
			workers[w.Name] = true
		}
	}
	var out []ateapi.Actor
	for _, a := range inv.Actors {
		if a.Worker != "" && workers[a.Worker] {
			out = append(out, a)
		}
	}
	return out
}

// FreeWorkers counts the free actor slots of the ACTIVE workers of pools
// on nodes (nil: any node): one per free worker before era D, reported
// capacity minus allocation in era D (Worker.FreeSlots).
func FreeWorkers(inv *ateapi.Inventory, pools []Pool, nodes map[string]bool) int {
	set := PoolSet(pools)
	n := 0
	for _, w := range inv.Workers {
		if set[w.PoolKey()] && (nodes == nil || nodes[w.Node]) {
			n += w.FreeSlots()
		}
	}
	return n
}

// MarkDown marks (Worker.Down) each worker of inv that cannot serve
// whatever the substrate says: its pod, found among pods by UID, is
// Terminating, not Running (a Failed pod a kubelet eviction left) or not
// Ready (the node lifecycle controller marks the pods of a NotReady node
// so), or its node is one notReady names (with why). A worker whose pod
// is not among pods is left as the substrate says: the pods were listed
// at another moment, and a pod created since is not missing.
func MarkDown(inv *ateapi.Inventory, pods []corev1.Pod, notReady map[string]string) {
	if inv == nil {
		return
	}
	byUID := make(map[string]*corev1.Pod, len(pods))
	for i := range pods {
		byUID[string(pods[i].UID)] = &pods[i]
	}
	for i := range inv.Workers {
		w := &inv.Workers[i]
		if why, down := notReady[w.Node]; down {
			w.Down = "node " + w.Node + " NotReady (" + why + ")"
			continue
		}
		p := byUID[w.Name]
		switch {
		case p == nil:
		case p.DeletionTimestamp != nil:
			w.Down = "pod " + p.Name + " Terminating"
		case p.Status.Phase != corev1.PodRunning:
			w.Down = "pod " + p.Name + " " + string(p.Status.Phase)
			if p.Status.Reason != "" {
				w.Down += " (" + p.Status.Reason + ")"
			}
		case !kube.PodReady(p):
			w.Down = "pod " + p.Name + " not Ready"
		}
	}
}

// WithNodePods is pods with those on node (or of a worker there: scheduled
// since pods was listed) replaced by onNode, read later.
func WithNodePods(pods []corev1.Pod, node string, onNode []corev1.Pod) []corev1.Pod {
	later := make(map[string]bool, len(onNode))
	for i := range onNode {
		later[string(onNode[i].UID)] = true
	}
	out := make([]corev1.Pod, 0, len(pods)+len(onNode))
	for i := range pods {
		if pods[i].Spec.NodeName != node && !later[string(pods[i].UID)] {
			out = append(out, pods[i])
		}
	}
	return append(out, onNode...)
}

// DownWorkers names the workers of pools (nil: any) MarkDown marked, with
// why, for a refusal that says what it did not count.
func DownWorkers(inv *ateapi.Inventory, pools map[string]bool) []string {
	var out []string
	for _, w := range inv.Workers {
		if w.Down != "" && w.State == ateapi.WorkerActive && (pools == nil || pools[w.PoolKey()]) {
			out = append(out, w.Name+" on "+w.Node+": "+w.Down)
		}
	}
	sort.Strings(out)
	return out
}

// UnservedClones are the pools among old whose clone wants workers (it or
// the pool has desired replicas) but has none serving (registered, ACTIVE,
// capacity reported in era D): once the old pools are gone their actors
// would have nowhere to resume. Each is "pool → clone".
func UnservedClones(inv *ateapi.Inventory, old []Pool, all []Pool) []string {
	desired := map[string]int64{}
	for _, p := range all {
		desired[p.Key()] = p.Desired
	}
	serving := map[string]bool{}
	for _, w := range inv.Workers {
		if w.Serving() {
			serving[w.PoolKey()] = true
		}
	}
	var out []string
	for _, p := range old {
		clone := p.Namespace + "/" + p.CloneName
		if p.CloneName != "" && (p.Desired > 0 || desired[clone] > 0) && !serving[clone] {
			out = append(out, p.Key()+" → "+clone)
		}
	}
	sort.Strings(out)
	return out
}

// Lineages maps every pool key of a serving pool and of its clone to the
// serving pool's key: an actor suspended off one may resume on either.
func Lineages(c *Cluster) map[string]string {
	m := map[string]string{}
	for _, p := range c.ServingPools() {
		m[p.Key()] = p.Key()
		if p.CloneName != "" {
			m[p.Namespace+"/"+p.CloneName] = p.Key()
		}
	}
	return m
}

// Need is what suspending one node's actors asks of one pool lineage.
type Need struct {
	Lineage string `json:"lineage"` // the serving pool's key; "" for paused actors (any lineage)
	Actors  int    `json:"actors"`  // to suspend on the node
	Free    int    `json:"free"`    // free actor slots of the lineage's ACTIVE workers on other nodes
}

func (n Need) String() string {
	what := "pool " + n.Lineage + " or its clone"
	if n.Lineage == "" {
		what = "any pool (paused actors)"
	}
	return fmt.Sprintf("%s: %d actor(s) to suspend, %d free actor slot(s) elsewhere", what, n.Actors, n.Free)
}

// Capacity compares, per pool lineage, the actors living on node with the
// free actor slots of the same lineage's ACTIVE workers on other nodes: the
// runbook's "take the next node once a free worker exists", made exact. A
// slot is a free worker before era D; in era D a worker hosts several
// actors, and its slots are its reported capacity minus its allocation
// (none while its capacity is unset: it is not serving yet). Paused actors
// have no worker, so they are weighed against every lineage's free slots.
// It returns every lineage and whether each has enough.
func Capacity(inv *ateapi.Inventory, lineage map[string]string, node string, residents []ateapi.Actor) (needs []Need, ok bool) {
	pool := map[string]string{} // worker → its pool key
	free := map[string]int{}
	total := 0
	for _, w := range inv.Workers {
		pool[w.Name] = w.PoolKey()
		if l, in := lineage[w.PoolKey()]; in && w.Node != node {
			free[l] += w.FreeSlots()
			total += w.FreeSlots()
		}
	}
	want := map[string]int{}
	for _, a := range residents {
		want[lineage[pool[a.Worker]]]++ // unknown pool or no worker → ""
	}
	ok = true
	sum := 0
	for l, n := range want {
		have := free[l]
		if l == "" {
			have = total
		}
		needs = append(needs, Need{Lineage: l, Actors: n, Free: have})
		ok = ok && n <= have
		sum += n
	}
	ok = ok && sum <= total
	sort.Slice(needs, func(i, j int) bool { return needs[i].Lineage < needs[j].Lineage })
	return needs, ok
}

// DescribeNeeds says each lineage's need, for a person.
func DescribeNeeds(needs []Need) string {
	var s []string
	for _, n := range needs {
		s = append(s, n.String())
	}
	return strings.Join(s, "; ")
}

// Inventorier is the part of the substrate client that only reads.
type Inventorier interface {
	Inventory(ctx context.Context) (*ateapi.Inventory, error)
}
