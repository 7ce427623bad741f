package campaign

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

// GKENodePoolLabel is the label GKE puts on every node of a node pool.
const GKENodePoolLabel = fleet.GKENodePoolLabel

// GKEPool is one GKE node pool as its nodes show it.
type GKEPool struct {
	Name  string
	Nodes []string
	// Unlabelled nodes lack the version label: GKE created them from a pool
	// that does not carry it, and nothing schedules to them.
	Unlabelled []string
}

// GKE is what the nodes and the kube context say about a GKE cluster: its
// location from a gcloud-made context name (zero when named otherwise).
type GKE struct {
	fleet.GKELocation
	Pools []GKEPool
}

// DetectGKE groups the nodes carrying GKE's node-pool label by pool; nil
// when no node does (not GKE).
func DetectGKE(nodes []corev1.Node, kubeContext string) *GKE {
	byPool := map[string]*GKEPool{}
	for _, n := range nodes {
		name, ok := n.Labels[GKENodePoolLabel]
		if !ok {
			continue
		}
		p := byPool[name]
		if p == nil {
			p = &GKEPool{Name: name}
			byPool[name] = p
		}
		p.Nodes = append(p.Nodes, n.Name)
		if n.Labels[fleet.VersionLabel] == "" {
			p.Unlabelled = append(p.Unlabelled, n.Name)
		}
	}
	if len(byPool) == 0 {
		return nil
	}
	g := &GKE{}
	g.GKELocation, _ = fleet.ParseGKEContext(kubeContext)
	for _, p := range byPool {
		sort.Strings(p.Nodes)
		sort.Strings(p.Unlabelled)
		g.Pools = append(g.Pools, *p)
	}
	sort.Slice(g.Pools, func(i, j int) bool { return g.Pools[i].Name < g.Pools[j].Name })
	return g
}

// intro names the cluster and pools, or says which names to fill in.
func (g *GKE) intro() string {
	var pools []string
	for _, p := range g.Pools {
		pools = append(pools, fmt.Sprintf("%s (%d node(s))", p.Name, len(p.Nodes)))
	}
	s := "node pool(s) " + strings.Join(pools, ", ")
	if g.Cluster != "" {
		s += fmt.Sprintf(" of cluster %s in %s, project %s", g.Cluster, g.Location, g.Project)
	} else {
		s += "; the kube context does not name the cluster: set CLUSTER and ZONE from `gcloud container clusters list`"
	}
	return s
}

// BeforeRoll is the runbook's "On GKE" section filled in: save and park
// each pool's autoscaler, add a maintenance exclusion, stamp the pool label
// with OLD; plus a warning per pool whose nodes lack the version label.
func (g *GKE) BeforeRoll(old string) string {
	if old == "" {
		old = "$OLD_VERSION"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "On GKE: %s. Before the first node:\n", g.intro())
	for _, p := range g.Pools {
		if len(p.Unlabelled) > 0 {
			fmt.Fprintf(&b, "  ! node pool %s: %d of %d node(s) lack %s (%s): nothing schedules to them. Label them "+
				"(kubectl label node NODE %s=%s) and stamp the pool below, or nodes GKE creates later arrive unlabelled too\n",
				p.Name, len(p.Unlabelled), len(p.Nodes), fleet.VersionLabel, fleet.Brief(p.Unlabelled), fleet.VersionLabel, old)
		}
	}
	w := g.Where()
	for _, p := range g.Pools {
		fmt.Fprintf(&b, "\n  # node pool %s\n", p.Name)
		fmt.Fprintf(&b, "  # 1. save the autoscaler config (restore it after the roll), then park the autoscaler: the old pool's\n"+
			"  #    Pending pods are the rollback reserve, not demand\n")
		fmt.Fprintf(&b, "  gcloud container node-pools describe %s %s --format='json(autoscaling)' > autoscaling-%s.json\n", p.Name, w,
			p.Name)
		fmt.Fprintf(&b, "  gcloud container clusters update %s %s --node-pool %s --no-enable-autoscaling\n", g.ClusterName(),
			g.Loc(), p.Name)
		fmt.Fprintf(&b, "  # 2. stamp the pool with OLD so nodes GKE creates later carry it; --node-labels REPLACES the pool's user\n"+
			"  #    labels: copy them from the first command into the second\n")
		fmt.Fprintf(&b, "  gcloud container node-pools describe %s %s --format='get(config.labels)'\n", p.Name, w)
		fmt.Fprintf(&b, "  gcloud container node-pools update %s %s --node-labels=<every existing user label>,%s=%s\n", p.Name, w,
			fleet.VersionLabel, old)
	}
	fmt.Fprintf(&b, "\n  # 3. if a maintenance window falls inside the roll: a node GKE recreates comes back at the pool's label\n")
	fmt.Fprintf(&b, "  gcloud container clusters update %s %s --add-maintenance-exclusion-name=ate-roll "+
		"--add-maintenance-exclusion-start=<start> --add-maintenance-exclusion-end=<end> "+
		"--add-maintenance-exclusion-scope=no_upgrades\n", g.ClusterName(), g.Loc())
	return b.String()
}

// AfterRoll is the runbook's "After the roll, on GKE" section filled in:
// relabel each pool with NEW carrying every existing label, then restore
// its autoscaler. Only once every node is at NEW.
func (g *GKE) AfterRoll(newVersion string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "After the roll, on GKE: %s.\n", g.intro())
	fmt.Fprintf(&b, "  ! Only now that every node shows %s=%s, and never earlier: relabelling a node pool applies to every\n"+
		"    node in it at once, with no drain and no pacing.\n", fleet.VersionLabel, newVersion)
	w := g.Where()
	for _, p := range g.Pools {
		fmt.Fprintf(&b, "\n  # node pool %s: --node-labels REPLACES the pool's user labels: copy them from the first command\n", p.Name)
		fmt.Fprintf(&b, "  gcloud container node-pools describe %s %s --format='get(config.labels)'\n", p.Name, w)
		fmt.Fprintf(&b, "  gcloud container node-pools update %s %s --node-labels=<every existing user label>,%s=%s\n", p.Name, w,
			fleet.VersionLabel, newVersion)
		fmt.Fprintf(&b, "  # restore the autoscaler from the config saved before the roll (autoscaling-%s.json)\n", p.Name)
		fmt.Fprintf(&b, "  gcloud container clusters update %s %s --node-pool %s --enable-autoscaling --min-nodes <min> "+
			"--max-nodes <max>\n", g.ClusterName(), g.Loc(), p.Name)
	}
	return b.String()
}

// GKEAfterRollDue reports the version every node is at when the roll has
// moved every node to NEW (and not yet retired), the moment the "After the
// roll, on GKE" steps become safe.
func GKEAfterRollDue(c *fleet.Cluster) (string, bool) {
	if c == nil || c.New == "" || len(c.Nodes) == 0 {
		return "", false
	}
	for _, n := range c.Nodes {
		if n.Version != c.New {
			return "", false
		}
	}
	return c.New, true
}
