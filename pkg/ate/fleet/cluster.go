package fleet

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/rollbook/rollbook/pkg/kube"
)

// Atelet is one atelet DaemonSet.
type Atelet struct {
	Name      string    `json:"name"`
	Version   string    `json:"version"`
	Desired   int32     `json:"desired"`
	Ready     int32     `json:"ready"`
	Created   time.Time `json:"created"`
	Versioned bool      `json:"versioned"`
	// Reached and Reverted are AnnEveryNodeReached and
	// AnnControlPlaneReverted (zero: not recorded).
	Reached  time.Time `json:"everyNodeReached,omitzero"`
	Reverted time.Time `json:"controlPlaneReverted,omitzero"`
	// APIServerAtReached and Step6Seen are AnnAPIServerAtReached and
	// AnnStep6Seen ("": not recorded).
	APIServerAtReached string `json:"apiServerAtReached,omitempty"`
	Step6Seen          string `json:"step6Seen,omitempty"`
}

// Pool is one WorkerPool.
type Pool struct {
	Namespace    string            `json:"namespace"`
	Name         string            `json:"name"`
	Labels       map[string]string `json:"labels,omitempty"`
	Pin          string            `json:"pin"` // spec.template.nodeSelector[version label]
	Image        string            `json:"image"`
	SandboxClass string            `json:"sandboxClass,omitempty"`
	Desired      int64             `json:"desired"`
	Ready        int64             `json:"ready"`
	ClonedFrom   string            `json:"clonedFrom,omitempty"`
	// Generation is metadata.generation; SourceGeneration a clone's
	// AnnSourceGeneration (0: not recorded).
	Generation       int64 `json:"generation,omitempty"`
	SourceGeneration int64 `json:"sourceGeneration,omitempty"`
	// CloneName is the clone serving this pool's traffic on NEW, if any.
	CloneName string                     `json:"clone,omitempty"`
	Object    *unstructured.Unstructured `json:"-"`
}

// Key is "namespace/name".
func (p Pool) Key() string { return p.Namespace + "/" + p.Name }

// NodeInfo is a node's place in the roll.
type NodeInfo struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Cordoned bool   `json:"cordoned,omitempty"`
	// CordonedBy is the rollbook runbook whose cordon it is ("" for a
	// person's, or none).
	CordonedBy string `json:"cordonedBy,omitempty"`
	// MovingTo is the version a node's move has begun towards (AnnMovingTo).
	MovingTo string `json:"movingTo,omitempty"`
	// VerifyPending is the version a flipped node has yet to show it serves
	// (AnnVerifyPending).
	VerifyPending string `json:"verifyPending,omitempty"`
}

// Cluster is what the Kubernetes API says about the roll.
type Cluster struct {
	Atelets []Atelet   `json:"atelets"`
	Old     string     `json:"old"`
	New     string     `json:"new,omitempty"`
	Nodes   []NodeInfo `json:"nodes"`
	Pools   []Pool     `json:"pools"`
	// Problems make the roll unsafe to drive; each says what to do.
	Problems []string `json:"problems,omitempty"`
	// GKE is where the kube context says the cluster is (set by the
	// command that read it), for the gcloud commands advice prints.
	GKE GKELocation `json:"-"`
	// APIServer is the images of the API server's Deployment
	// (APIServerDeployment), "" when it cannot be read (absent, forbidden).
	APIServer string `json:"apiServer,omitempty"`
	// Controller is the images of ate-controller's Deployment
	// (ControllerDeployment), "" when it cannot be read.
	Controller string `json:"controller,omitempty"`
	// objects are the nodes as listed: in full, or as metadata with the
	// cordoned ones in full (listedFull says which).
	objects    []corev1.Node
	listedFull bool
}

// ListedNode is node as the cluster's list showed it, if it was listed in
// full: the node a move starts on is taken from there, not read again a
// moment later.
func (c *Cluster) ListedNode(name string) *corev1.Node {
	if !c.listedFull {
		return nil
	}
	return c.listed(name)
}

// ListedNodeMeta is node as the cluster's list showed it, in full or as
// metadata (its labels either way); nil when it was not listed.
func (c *Cluster) ListedNodeMeta(name string) *corev1.Node { return c.listed(name) }

// ListedFull says whether the nodes were listed in full (their status
// too), not as metadata.
func (c *Cluster) ListedFull() bool { return c.listedFull }

// FullNodes are the nodes in full (taints, labels): as listed, or listed
// again when the cluster read them as metadata.
func (c *Cluster) FullNodes(ctx context.Context, cs kubernetes.Interface) ([]corev1.Node, error) {
	if c.listedFull {
		return c.objects, nil
	}
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return l.Items, nil
}

// NodeObjects are the nodes as listed: in full, or as metadata with the
// cordoned ones in full.
func (c *Cluster) NodeObjects() []corev1.Node { return c.objects }

// SetNodeObjects records the nodes as they were listed (full: in full),
// for a read model built by hand.
func (c *Cluster) SetNodeObjects(nodes []corev1.Node, full bool) {
	c.objects, c.listedFull = nodes, full
}

func (c *Cluster) listed(name string) *corev1.Node {
	for i := range c.objects {
		if c.objects[i].Name == name {
			return &c.objects[i]
		}
	}
	return nil
}

// Stub is the node as NodeInfo knows it (a Cluster built by hand, not
// listed): its version label, cordon and rollbook's marks.
func (i NodeInfo) Stub() *corev1.Node {
	n := &corev1.Node{}
	n.Name, n.Labels, n.Annotations = i.Name, map[string]string{VersionLabel: i.Version}, map[string]string{}
	n.Spec.Unschedulable = i.Cordoned
	if i.CordonedBy != "" {
		n.Annotations[kube.AnnCordonedBy] = i.CordonedBy
	}
	if i.MovingTo != "" {
		n.Annotations[AnnMovingTo] = i.MovingTo
	}
	if i.VerifyPending != "" {
		n.Annotations[AnnVerifyPending] = i.VerifyPending
	}
	return n
}

// versionedName is atelet-<suffix>; an unversioned install has plain "atelet".
var versionedName = regexp.MustCompile(`^atelet-[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ObserveCluster reads the atelet DaemonSets, the node version labels and
// the WorkerPools: three lists, together, whatever the roll's state.
func ObserveCluster(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface) (*Cluster, error) {
	return ObserveClusterMeta(ctx, cs, dyn, nil)
}

// ObserveClusterMeta is ObserveCluster reading the nodes as metadata (md; a
// status of thousands of nodes needs only their labels and cordons).
func ObserveClusterMeta(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, md metadata.Interface) (*Cluster, error) {
	c := &Cluster{}
	var dss *appsv1.DaemonSetList
	var nodes []corev1.Node
	var pools *unstructured.UnstructuredList
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		dss, err = cs.AppsV1().DaemonSets(Namespace).List(gctx, metav1.ListOptions{LabelSelector: AppLabel + "=" + AteletApp})
		if err != nil {
			return fmt.Errorf("list atelet DaemonSets in %s: %w", Namespace, err)
		}
		return nil
	})
	g.Go(func() (err error) {
		nodes, err = kube.ListNodesLight(gctx, md, cs, "")
		return err
	})
	g.Go(func() (err error) {
		c.APIServer, c.Controller, err = controlPlaneImages(gctx, cs)
		return err
	})
	g.Go(func() (err error) {
		pools, err = dyn.Resource(WorkerPoolGVR).Namespace(metav1.NamespaceAll).List(gctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("list WorkerPools: %w", err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, ds := range dss.Items {
		c.Atelets = append(c.Atelets, ateletOf(&ds))
	}
	sort.Slice(c.Atelets, func(i, j int) bool { return c.Atelets[i].Created.Before(c.Atelets[j].Created) })
	c.Nodes = nodeInfos(nodes)
	c.objects, c.listedFull = nodes, md == nil
	if pools != nil {
		for i := range pools.Items {
			c.Pools = append(c.Pools, PoolOf(&pools.Items[i]))
		}
	}
	sort.Slice(c.Pools, func(i, j int) bool { return c.Pools[i].Key() < c.Pools[j].Key() })
	c.Infer()
	return c, nil
}

func nodeInfos(nodes []corev1.Node) []NodeInfo {
	out := make([]NodeInfo, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		out = append(out, NodeInfo{Name: n.Name, Version: n.Labels[VersionLabel], Cordoned: n.Spec.Unschedulable,
			CordonedBy: kube.CordonStateOf(n).Owner, MovingTo: n.Annotations[AnnMovingTo], VerifyPending: n.Annotations[AnnVerifyPending]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WithNodes is c with its nodes as nodes shows them (its atelets and pools
// as c read them): a fresh look at the nodes alone.
func (c *Cluster) WithNodes(nodes []corev1.Node) *Cluster {
	d := *c
	d.Nodes = nodeInfos(nodes)
	d.objects, d.listedFull = nodes, true
	return &d
}

func ateletOf(ds *appsv1.DaemonSet) Atelet {
	a := Atelet{Name: ds.Name, Version: ds.Labels[VersionLabel], Desired: ds.Status.DesiredNumberScheduled,
		Ready: ds.Status.NumberReady, Created: ds.CreationTimestamp.Time,
		Versioned: versionedName.MatchString(ds.Name) && ds.Labels[VersionLabel] != ""}
	a.Reached, _ = time.Parse(time.RFC3339, ds.Annotations[AnnEveryNodeReached])
	a.Reverted, _ = time.Parse(time.RFC3339, ds.Annotations[AnnControlPlaneReverted])
	a.APIServerAtReached, a.Step6Seen = ds.Annotations[AnnAPIServerAtReached], ds.Annotations[AnnStep6Seen]
	return a
}

// NewAtelet is the NEW atelet DaemonSet (nil before step 3).
func (c *Cluster) NewAtelet() *Atelet {
	for i := range c.Atelets {
		if c.New != "" && c.Atelets[i].Version == c.New {
			return &c.Atelets[i]
		}
	}
	return nil
}

// ControlPlaneMayBeNew says whether step 6 may have upgraded the control
// plane: every node reached NEW once (recorded when it happened, not
// re-derived from nodes that may join later at OLD), and no rollback was
// told since that the OLD API server is back; when says since when.
func (c *Cluster) ControlPlaneMayBeNew() (when time.Time, ok bool) {
	a := c.NewAtelet()
	if a == nil || a.Reached.IsZero() || !a.Reverted.Before(a.Reached) {
		return time.Time{}, false
	}
	return a.Reached, true
}

// PoolOf is the WorkerPool object u as the read model shows it.
func PoolOf(u *unstructured.Unstructured) Pool {
	p := Pool{Namespace: u.GetNamespace(), Name: u.GetName(), Labels: u.GetLabels(), Object: u}
	p.Pin, _, _ = unstructured.NestedString(u.Object, "spec", "template", "nodeSelector", VersionLabel)
	p.Image, _, _ = unstructured.NestedString(u.Object, "spec", "workerImage")
	if p.Image == "" {
		p.Image, _, _ = unstructured.NestedString(u.Object, "spec", "ateomImage")
	}
	if classes, ok, _ := unstructured.NestedSlice(u.Object, "spec", "sandboxClasses"); ok && len(classes) > 0 {
		if m, ok := classes[0].(map[string]any); ok {
			p.SandboxClass, _ = m["name"].(string)
		}
	}
	if p.SandboxClass == "" {
		p.SandboxClass, _, _ = unstructured.NestedString(u.Object, "spec", "sandboxClass")
	}
	p.Desired, _, _ = unstructured.NestedInt64(u.Object, "spec", "replicas")
	p.Ready, _, _ = unstructured.NestedInt64(u.Object, "status", "readyReplicas")
	p.ClonedFrom = u.GetAnnotations()[AnnClonedFrom]
	p.Generation = u.GetGeneration()
	p.SourceGeneration, _ = strconv.ParseInt(u.GetAnnotations()[AnnSourceGeneration], 10, 64)
	return p
}

// Infer derives OLD and NEW and records what makes the roll unsafe.
func (c *Cluster) Infer() {
	for _, a := range c.Atelets {
		if !a.Versioned {
			c.Problems = append(c.Problems, fmt.Sprintf("atelet DaemonSet %s has no version suffix or no %s label: this install "+
				"predates versioned builds and needs a fresh install (a DaemonSet selector cannot change in place)", a.Name, VersionLabel))
		}
	}
	switch len(c.Atelets) {
	case 0:
		c.Problems = append(c.Problems, fmt.Sprintf("no atelet DaemonSet (label %s=%s) in %s: is Agent Substrate installed, and is this "+
			"the right context?", AppLabel, AteletApp, Namespace))
		return
	case 1:
		c.Old = c.Atelets[0].Version
	case 2:
		c.Old, c.New = oldAndNew(c.Atelets[0], c.Atelets[1], c.Pools)
	default:
		var names []string
		for _, a := range c.Atelets {
			names = append(names, a.Name+" ("+a.Version+")")
		}
		c.Problems = append(c.Problems, fmt.Sprintf("%d atelet DaemonSets (%s): a third one means ate-setup computed another version; "+
			"delete the stray one and check VERSION", len(c.Atelets), strings.Join(names, ", ")))
		return
	}
	var unlabelled, other []string
	for _, n := range c.Nodes {
		switch n.Version { // "" first: before step 3, NEW is "" too
		case "":
			unlabelled = append(unlabelled, n.Name)
		case c.Old, c.New:
		default:
			other = append(other, n.Name+"="+n.Version)
		}
	}
	if len(unlabelled) > 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("%d node(s) without %s schedule no atelet (%s); label them %s=%s (on GKE, also the "+
			"node pool)", len(unlabelled), VersionLabel, Brief(unlabelled), VersionLabel, c.Old))
	}
	if len(other) > 0 {
		c.Problems = append(c.Problems, fmt.Sprintf("node(s) at a version that is neither OLD nor NEW: %s", Brief(other)))
	}
	c.pairClones()
}

// pairClones links each OLD-pinned pool to its NEW clone: our annotation
// first, else same namespace, labels and sandbox class, pinned to NEW.
func (c *Cluster) pairClones() {
	if c.New == "" {
		return
	}
	taken := map[string]bool{}
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Pin != c.Old {
			continue
		}
		for j := range c.Pools {
			q := &c.Pools[j]
			if q.Pin == c.New && q.ClonedFrom == p.Key() && !taken[q.Key()] {
				p.CloneName, taken[q.Key()] = q.Name, true
				break
			}
		}
	}
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Pin != c.Old || p.CloneName != "" {
			continue
		}
		for j := range c.Pools {
			q := &c.Pools[j]
			if q.Pin == c.New && !taken[q.Key()] && q.ClonedFrom == "" && q.Namespace == p.Namespace &&
				q.SandboxClass == p.SandboxClass && sameLabels(p.Labels, q.Labels) {
				p.CloneName, taken[q.Key()] = q.Name, true
				break
			}
		}
	}
}

// OldPools are the pools serving on OLD (pinned to it).
func (c *Cluster) OldPools() []Pool {
	var out []Pool
	for _, p := range c.Pools {
		if p.Pin == c.Old && c.Old != "" {
			out = append(out, p)
		}
	}
	return out
}

// ServingPools are the pools that serve actors today: every pool but the
// clones pinned to NEW. After a retire the serving pools are former clones,
// so a clone annotation does not make a pool any less serving.
func (c *Cluster) ServingPools() []Pool {
	var out []Pool
	for _, p := range c.Pools {
		if c.New == "" || p.Pin != c.New {
			out = append(out, p)
		}
	}
	return out
}

// PoolsPinnedTo returns the pools pinned to version.
func (c *Cluster) PoolsPinnedTo(version string) []Pool {
	var out []Pool
	for _, p := range c.Pools {
		if p.Pin == version && version != "" {
			out = append(out, p)
		}
	}
	return out
}

// NodesAt returns the nodes labelled version.
func (c *Cluster) NodesAt(version string) []string {
	var out []string
	for _, n := range c.Nodes {
		if n.Version == version {
			out = append(out, n.Name)
		}
	}
	return out
}

// SetOf is items as a set.
func SetOf(items []string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, s := range items {
		m[s] = true
	}
	return m
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Brief lists at most five of items and counts the rest.
func Brief(items []string) string {
	if len(items) > 5 {
		return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
	}
	return strings.Join(items, ", ")
}

// AllAt reports whether every node carries version.
func (c *Cluster) AllAt(version string) bool {
	return len(c.Nodes) > 0 && len(c.NodesAt(version)) == len(c.Nodes)
}

// AteletList names each atelet DaemonSet with its version.
func (c *Cluster) AteletList() string {
	var s []string
	for _, a := range c.Atelets {
		s = append(s, a.Name+"="+OrNone(a.Version))
	}
	return strings.Join(s, ", ")
}
