package roll

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

// RollPreconditions are what must hold before any node moves from OLD to
// NEW, checked by `roll next-node` itself (and shown by preflight): the two
// atelet DaemonSets are OLD and NEW, every serving pool is pinned to OLD
// and has a clone pinned to NEW whose Deployment exists (else the actors
// suspended off a node have nowhere to resume), and more than one node
// unless a full stop is accepted.
func RollPreconditions(c *fleet.Cluster, deployments fleet.PoolDeployments, allowFullStop bool) []fleet.Check {
	var out []fleet.Check
	add := func(name string, ok bool, detail, fix string) {
		out = append(out, fleet.Check{Group: "roll", Name: name, OK: ok, Detail: detail, Fix: fix})
	}
	add("the roll's shape is known", len(c.Problems) == 0, strings.Join(c.Problems, "; "), "fix the problems shown by kubectl ate status")
	add("two atelet DaemonSets, OLD and NEW", len(c.Atelets) == 2 && c.New != "", c.AteletList(),
		"deploy the new atelet first (ate-setup deploy atelet from the new release)")
	if c.New == "" {
		return out
	}
	add(stepTwo, c.ControllerBehind() == "", c.ControllerBehind(), stepTwoFix(c.New))
	var unpinned, unpaired, undeployed, failing, unplaceable, unlike, edited []string
	byKey := map[string]fleet.Pool{}
	for _, p := range c.Pools {
		byKey[p.Key()] = p
	}
	failingNS := map[string]bool{}
	for _, p := range c.ServingPools() {
		if p.Pin != c.Old {
			unpinned = append(unpinned, p.Key()+" (pin "+fleet.OrNone(p.Pin)+")")
			continue
		}
		if p.CloneName == "" {
			unpaired = append(unpaired, p.Key())
			continue
		}
		clone := p.Namespace + "/" + p.CloneName
		if cp, ok := byKey[clone]; ok {
			// What the actors are matched by and run in must carry over: a
			// class lost on write serves the default one.
			if a, b := classOf(p), classOf(cp); a != b {
				unlike = append(unlike, fmt.Sprintf("%s: sandbox class %s, its source %s %s", clone, b, p.Key(), a))
			} else if !maps.Equal(p.Labels, cp.Labels) {
				unlike = append(unlike, fmt.Sprintf("%s: labels %v, its source %s %v", clone, cp.Labels, p.Key(), p.Labels))
			}
			// A source changed since clone-pools copied it, and unlike its
			// clone now: edited or scaled mid-roll. Changes undone, or made
			// in the clone too, leave them alike; a clone edited alone (its
			// placement fixed, as the checks below advise) is not its
			// source's change.
			if g := cp.SourceGeneration; g != 0 && p.Generation != g {
				if diff := CloneDiff(p, cp, nil); len(diff) > 0 {
					edited = append(edited, fmt.Sprintf("%s: generation %d when %s was cloned from it, %d now: %s", p.Key(), g,
						clone, p.Generation, strings.Join(diff, ", ")))
				}
			}
		}
		if deployments.Count[clone] == 0 {
			undeployed = append(undeployed, clone)
		}
		if why := deployments.Failure[clone]; why != "" {
			failing = append(failing, why)
			failingNS[p.Namespace] = true
		}
		if spec, ok := deployments.Template[clone]; ok {
			if why := fleet.Unfit(spec, deployments.Nodes, c.New); why != "" {
				unplaceable = append(unplaceable, clone+": "+why)
			}
		}
	}
	add("every serving pool is pinned to OLD ("+c.Old+")", len(unpinned) == 0, fleet.Brief(unpinned),
		"kubectl ate preflight --pin-pools (only while no actor is on the pool's workers)")
	add("every serving pool has a clone pinned to NEW ("+c.New+")", len(unpaired) == 0, "no clone: "+fleet.Brief(unpaired),
		"kubectl ate roll clone-pools --image CLASS=REF@sha256:… (the actors suspended off a node need a new-pool worker to resume on)")
	add("every clone keeps its source's sandbox class and labels", len(unlike) == 0, strings.Join(unlike, "; "),
		"before any node is at NEW: delete the clone (kubectl delete workerpool -n NS NAME) and clone again; a class lost on "+
			"write means the served WorkerPool CRD is older than the new release's: apply it first (runbook step 1)")
	add("no serving pool edited or scaled since its clone was made", len(edited) == 0, strings.Join(edited, "; "),
		"the runbook: do not edit or scale serving pools mid-roll. Undo the change, or make the same change in the "+
			"clone (kubectl edit workerpool -n NS CLONE), then re-run")
	add("every clone has its Deployment", len(undeployed) == 0, "no Deployment: "+fleet.Brief(undeployed),
		"is ate-controller running? It renders each WorkerPool into a Deployment")
	// A clone whose pods cannot even be created serves nowhere once nodes
	// flip: the actors suspended off them would have no worker to resume
	// on. (Its pods are Pending until a node is at NEW: that is expected.)
	var quotas []string
	for ns := range failingNS {
		quotas = append(quotas, "kubectl describe resourcequota -n "+ns)
	}
	sort.Strings(quotas)
	add("every clone's Deployment can create its pods", len(failing) == 0, strings.Join(failing, "; "),
		"make room for the clones' pods, then re-run: "+fleet.OrNone(strings.Join(quotas, "; "))+" (raise the quota, or lower the "+
			"pools' resources); kubectl get events shows what else refused them")
	// A clone whose pods no node admits once flipped (a taint without a
	// toleration, a node selector or affinity for another architecture)
	// serves nowhere either; before the first flip its pods are only
	// Pending, so the template is checked against the nodes.
	add("every clone's pods fit a node once it is at NEW", len(unplaceable) == 0, strings.Join(unplaceable, "; "),
		"make the clone's WorkerPool template admit the nodes (kubectl edit workerpool -n NS NAME: add the toleration, or "+
			"an image and node selector for the nodes' architecture), or remove the taint (kubectl taint node NODE KEY-), "+
			"then re-run")
	add("more than one node, or --allow-full-stop", len(c.Nodes) > 1 || allowFullStop, fmt.Sprintf("%d node(s)", len(c.Nodes)),
		"on a single node the roll suspends every actor at once; pass --allow-full-stop to accept that")
	return out
}

// stepTwo is the check that ate-controller was upgraded first (runbook
// step 2): it renders every pool, the clones too, and the new release's
// pools may use fields only its controller knows.
const stepTwo = "ate-controller upgraded before the dataplane (runbook step 2), where its image tag tells"

func stepTwoFix(newVersion string) string {
	return "from a checkout of the new release: VERSION=" + newVersion + " go run ./cmd/ate-setup deploy ate-controller, then re-run"
}
