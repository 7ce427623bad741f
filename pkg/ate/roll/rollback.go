package roll

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RollbackRunbookName names the cluster-scope part of a rollback.
const RollbackRunbookName = "ate-rollback"

func actorNames(actors []ateapi.Actor) string {
	var names []string
	for _, a := range actors {
		names = append(names, a.Atespace+"/"+a.Name)
	}
	sort.Strings(names)
	return fleet.Brief(names)
}

// RollbackRunbook undoes steps 4 and 3 once every node is back at OLD:
// delete each clone (pools pinned to NEW) once no actor is bound to one of
// their workers, then the NEW atelet DaemonSet once no node carries NEW.
// Run it on runbook.ScopeTarget{Scope: "roll"}.
func RollbackRunbook(cs kubernetes.Interface, dyn dynamic.Interface, api fleet.Inventorier,
	rec kube.Recorder) *runbook.Runbook[removalFacts] {
	return &runbook.Runbook[removalFacts]{
		Name:  RollbackRunbookName,
		Title: "Remove the new version's pools and atelet once every node is back",
		Doc: `The cluster part of a rollback, after every node is back at OLD: delete each clone (a
WorkerPool pinned to NEW) once no actor is bound to one of its workers, then delete the NEW
atelet DaemonSet once no node carries NEW. The old pools and the old atelet are never
touched: rolling back leaves exactly what was there before the roll. Retire runs the same
two steps on OLD.`,
		Observe: func(ctx context.Context, _ runbook.Target) (removalFacts, error) {
			return observeRemoval(ctx, cs, dyn, api, rollbackNew)
		},
		Notes: func(f removalFacts) []string {
			var notes []string
			if n := f.nodesAt(); len(n) > 0 {
				notes = append(notes, fmt.Sprintf("%d node(s) still at %s (%s): kubectl ate rollback next-node "+
					"--all", len(n), f.version, fleet.Brief(n)))
			}
			if len(f.bound) > 0 {
				notes = append(notes, fmt.Sprintf("%d actor(s) bound to a %s worker: %s", len(f.bound), f.version, actorNames(f.bound)))
			}
			return notes
		},
		Steps: []runbook.Step[removalFacts]{
			deletePoolsStep("ate.rollback.delete-clones", rollbackNew, dyn, rec,
				"Delete each WorkerPool pinned to NEW (its Deployment and pods go with it) once every node is back at OLD and no "+
					"actor is bound to one of its workers. The old pools are never touched."),
			deleteAteletStep("ate.rollback.delete-new-atelet", rollbackNew, cs, rec,
				"Delete the atelet DaemonSet of NEW once no node carries NEW (it runs no pod then) and no pool is pinned to NEW. "+
					"The old atelet DaemonSet stays."),
		},
	}
}

// ExternalStep is a runbook step rollbook cannot do or observe: a command
// the user runs from a release checkout.
type ExternalStep struct {
	When    string `json:"when"`
	Command string `json:"command"`
}

// ControlPlaneFirst is what must run before any node moves back once every
// node reached NEW (the only time step 6 may have run): the OLD API server.
func ControlPlaneFirst(old string) ExternalStep {
	return ExternalStep{When: "if step 6 ran (control plane upgraded): first, before any node moves back",
		Command: "VERSION=" + old + " go run ./cmd/ate-setup deploy apiserver"}
}

// RollbackExternalSteps are the commands left to the user once the nodes,
// the clones and the NEW atelet are back, in the runbook's order ("the
// control plane first, then the nodes, then ate-controller last"), to run
// from a checkout of the OLD release with the install's environment. The
// check for a third atelet DaemonSet comes only after them: that is when
// one can appear.
// gke fills in the gcloud command's cluster and location.
func RollbackExternalSteps(old string, gke fleet.GKELocation) []ExternalStep {
	v := "VERSION=" + old + " "
	return []ExternalStep{
		{When: "if you relabeled the GKE node pool", Command: "park the autoscaler again, then set the node pool label back: " +
			"gcloud container node-pools update $NODEPOOL " + gke.Where() + " --node-labels=<every existing user label>," +
			fleet.VersionLabel + "=" + old},
		{When: "if step 6 ran: now that the nodes are back", Command: v + "go run ./cmd/ate-setup deploy ate-system"},
		{When: "if step 2 ran (ate-controller upgraded): last", Command: v + "go run ./cmd/ate-setup deploy ate-controller"},
		{When: "then", Command: "kubectl ate rollback   (checks that no third atelet DaemonSet appeared)"},
	}
}

// StrayAtelets are the atelet DaemonSets other than version's: after a
// rollback there must be none (a third DaemonSet means the old checkout
// computed another version).
func StrayAtelets(c *fleet.Cluster, version string) []fleet.Atelet {
	var out []fleet.Atelet
	for _, a := range c.Atelets {
		if a.Version != version {
			out = append(out, a)
		}
	}
	return out
}
