package campaign

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

// PreflightOptions tune the checks.
type PreflightOptions struct {
	AllowFullStop bool
	// Deployments per pool key, for the roll's preconditions once NEW exists.
	Deployments fleet.PoolDeployments
}

// Preflight checks everything the runbook asks to confirm before the first
// node. caps is nil when the API could not be reached (apiErr says why).
func Preflight(ctx context.Context, cs kubernetes.Interface, c *fleet.Cluster, caps *ateapi.Capabilities, apiErr error,
	o PreflightOptions) []fleet.Check {
	var out []fleet.Check
	add := func(group, name string, ok bool, detail, fix string) {
		out = append(out, fleet.Check{Group: group, Name: name, OK: ok, Detail: detail, Fix: fix})
	}
	// Dataplane
	versioned := len(c.Atelets) > 0
	for _, a := range c.Atelets {
		versioned = versioned && a.Versioned
	}
	add("dataplane", "atelet DaemonSets carry a version suffix and label", versioned, c.AteletList(),
		"a pre-versioned install cannot be rolled: reinstall with a versioned build")
	add("dataplane", "at most two atelet DaemonSets (OLD and NEW)", len(c.Atelets) <= 2, c.AteletList(),
		"delete the stray DaemonSet and check VERSION in the checkout that made it")
	if c.New != "" {
		var newDS fleet.Atelet
		for _, a := range c.Atelets {
			if a.Version == c.New {
				newDS = a
			}
		}
		add("dataplane", "the NEW atelet DaemonSet is present with 0 pods before any flip", newDS.Desired == 0 || len(c.NodesAt(c.New)) > 0,
			fmt.Sprintf("%s desired %d", newDS.Name, newDS.Desired), "")
	}
	// Nodes
	unlabelled, other := 0, 0
	for _, n := range c.Nodes {
		switch n.Version { // "" first: before step 3, NEW is "" too
		case "":
			unlabelled++
		case c.Old, c.New:
		default:
			other++
		}
	}
	add("nodes", "every node carries "+fleet.VersionLabel, unlabelled == 0, fmt.Sprintf("%d unlabelled", unlabelled),
		fmt.Sprintf("kubectl label node NODE %s=%s (on GKE also the node pool, before the roll)", fleet.VersionLabel, c.Old))
	add("nodes", "every node is at OLD or NEW", other == 0, fmt.Sprintf("%d at another version", other), "")
	add("nodes", "at least two nodes, so the roll never stops everything", len(c.Nodes) >= 2 || o.AllowFullStop,
		fmt.Sprintf("%d node(s)", len(c.Nodes)), "on a single node the roll is a full stop; pass --allow-full-stop to accept that")
	// Pools: every serving one, former clones included.
	for _, p := range c.ServingPools() {
		add("pools", fmt.Sprintf("pool %s is pinned to OLD", p.Key()), p.Pin == c.Old, "pin "+fleet.OrNone(p.Pin),
			"kubectl ate preflight --pin-pools (only while no actor is on its workers: the pin re-renders its Deployment)")
		add("pools", fmt.Sprintf("pool %s is READY==DESIRED", p.Key()), p.Ready == p.Desired,
			fmt.Sprintf("%d/%d ready", p.Ready, p.Desired), "wait for the pool's pods, or find why they are not Ready (kubectl get "+
				"deploy -l "+fleet.PoolLabel+"="+p.Name+")")
	}
	// What roll next-node itself refuses without, once NEW exists.
	// Before step 4 (no clone yet) the clone checks are reminders: next-node
	// refuses until they hold.
	if c.New != "" {
		for _, ck := range roll.RollPreconditions(c, o.Deployments, o.AllowFullStop) {
			if ck.Name == "the roll's shape is known" || ck.Name == "more than one node, or --allow-full-stop" {
				continue // said above
			}
			if !ck.OK && countClones(c) == 0 && strings.Contains(ck.Name, "clone") {
				ck.Warning, ck.Detail = true, "step 4 not done yet; roll next-node refuses until it is"
			}
			out = append(out, ck)
		}
		if countClones(c) > 0 {
			out = append(out, roll.PullCheck(ctx, cs, c, o.Deployments))
		}
	}
	out = append(out, apiChecks(caps, apiErr)...)
	// GKE
	nodes, _ := gkeFacts(ctx, cs)
	gke, spot := nodes.gke, nodes.spot
	if gke > 0 {
		out = append(out,
			fleet.Check{Group: "gke", Name: "node-pool autoscaler parked", OK: true, Warning: true,
				Detail: "cannot be seen from Kubernetes",
				Fix: "gcloud container node-pools update POOL --no-enable-autoscaling (old-pool pods go Pending on purpose as the " +
					"rollback reserve)"},
			fleet.Check{Group: "gke", Name: "maintenance exclusion in place", OK: true, Warning: true,
				Detail: "a recreated node comes back " +
					"with the pool's OLD label",
				Fix: "gcloud container clusters update … --add-maintenance-exclusion-…"},
			fleet.Check{Group: "gke", Name: "node pool carries " + fleet.VersionLabel + "=" + c.Old, OK: true, Warning: true,
				Detail: "do not relabel the pool until every node is rolled: it applies to every node at once"})
	}
	if spot > 0 {
		add("gke", "no spot/preemptible worker nodes", false, fmt.Sprintf("%d spot/preemptible node(s)", spot), "move workers off spot "+
			"nodes: they are drained without notice")
	}
	return out
}

// Failed counts blocking failures.
func Failed(checks []fleet.Check) int {
	n := 0
	for _, c := range checks {
		if !c.OK && !c.Warning {
			n++
		}
	}
	return n
}

type gkeCount struct{ gke, spot int }

func gkeFacts(ctx context.Context, cs kubernetes.Interface) (gkeCount, error) {
	var g gkeCount
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "cloud.google.com/gke-nodepool"})
	if err != nil {
		return g, err
	}
	g.gke = len(l.Items)
	for _, n := range l.Items {
		if n.Labels["cloud.google.com/gke-spot"] == "true" || n.Labels["cloud.google.com/gke-preemptible"] == "true" {
			g.spot++
		}
	}
	return g, nil
}

// apiChecks are preflight's checks of the control API: caps is nil when it
// could not be reached (apiErr says why).
func apiChecks(caps *ateapi.Capabilities, apiErr error) []fleet.Check {
	var out []fleet.Check
	add := func(group, name string, ok bool, detail, fix string) {
		out = append(out, fleet.Check{Group: group, Name: name, OK: ok, Detail: detail, Fix: fix})
	}
	switch {
	case apiErr != nil:
		add("api", "the control API is reachable", false, apiErr.Error(),
			"check svc/api in "+fleet.Namespace+", or pass --ate-endpoint/--ate-ca-file/--ate-token-file")
	case caps != nil:
		add("api", "DrainWorker is served and implemented", caps.DrainImplemented,
			fmt.Sprintf("era %s, methods %s", caps.Era, strings.Join(caps.Methods, ",")),
			"this install predates versioned builds: it needs a fresh install")
		add("api", "RevertActor is served (crashed-actor recovery)", caps.Has("RevertActor"), "",
			"the API server is upgraded last (step 6, after every node), never before the dataplane; until then a CRASHED "+
				"actor cannot be reverted: keep it (do not delete it) and run kubectl ate revert after step 6. The roll "+
				"suspends every actor before a pod is deleted, so it crashes none")
	}
	return out
}
