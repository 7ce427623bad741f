package roll

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// NodeRollOptions choose the nodes to move, which way and how.
type NodeRollOptions struct {
	Direction node.Direction
	Node      string // "" for the next one
	All       bool   // every remaining node, one at a time
	// Wait for enough free workers instead of refusing, for at most WaitTimeout.
	Wait          bool
	WaitTimeout   time.Duration
	AllowFullStop bool
	// ControlPlaneReverted says `deploy apiserver` ran from the OLD checkout
	// (or step 6 never ran): needed to move a node back once every node
	// reached NEW.
	ControlPlaneReverted bool
	Config               node.Config
	// GKE is where the kube context says the cluster is, for the gcloud
	// commands a stop prints.
	GKE fleet.GKELocation
	// DryRun only plans (one node); Say prints the run's progress.
	DryRun bool
	Say    func(format string, a ...any)
}

// Clients are what the node roll reads and acts through, built once for
// the session that runs it: its progress, pause, soak, journal and lock
// are the session's own (cli.RunSource).
type Clients struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	API      node.API
	Recorder kube.Recorder
}

// NodeRoll is the node roll (or rollback) as a target source: before each
// node it reads the cluster again and takes the node the node runbook's
// own positions say comes next (Locator.Next), so `--all`, a re-run after
// any interruption and `kubectl ate status` agree on it. One node.Run
// serves every node.
type NodeRoll struct {
	c   Clients
	o   NodeRollOptions
	run *node.Run
	// sides are the way the last node picked moved; err why the source
	// stopped early (a refusal, nothing changed on that node).
	sides node.Sides
	err   error
	// othersBehind counts, as the last pick read the cluster, the nodes
	// other than the one picked that were not at the way's target: while
	// any is, moving the picked one cannot make every node reach it, and
	// settle reads nothing.
	othersBehind int
	// picked is the cluster as the last pick read it.
	picked *fleet.Cluster
}

// NewNodeRoll prepares moving nodes the way o says.
func NewNodeRoll(c Clients, o NodeRollOptions) *NodeRoll {
	return &NodeRoll{c: c, o: o, run: node.NewRun(c.Client, c.API, c.Recorder, o.Config)}
}

// Run is the node runbook's run every node of the roll goes through.
func (r *NodeRoll) Run() *node.Run { return r.run }

// Err is why the roll stopped before a node it would have taken (nil when
// it ran out of nodes or the run stopped).
func (r *NodeRoll) Err() error { return r.err }

// Health is the soak's check: no actor CRASHED, and every worker of the
// pools the roll moves to ACTIVE.
func (r *NodeRoll) Health(ctx context.Context) error { return rollHealth(r.c.API, r.sides)(ctx) }

// Nodes yields the nodes to move, each picked once the one before ended.
func (r *NodeRoll) Nodes(ctx context.Context) iter.Seq[runbook.Target] {
	return func(yield func(runbook.Target) bool) {
		defer r.run.Close()
		for first := true; ; first = false {
			if !first && (!r.o.All || r.o.DryRun || r.o.Node != "") {
				r.settle(ctx)
				return
			}
			target, err := r.pick(ctx)
			if err != nil {
				r.err = err
				return
			}
			if target == "" {
				r.o.Say("every node is at %s", r.sides.To)
				return
			}
			r.o.Say("node %s: %s → %s", target, r.sides.From, r.sides.To)
			if !yield(r.run.Target(target)) {
				return
			}
		}
	}
}

// pick reads the cluster, checks the way's preconditions and returns the
// next node ("" when every node is there), the run begun on it.
func (r *NodeRoll) pick(ctx context.Context) (string, error) {
	cl, o := r.c, r.o
	c, err := fleet.ObserveCluster(ctx, cl.Client, cl.Dynamic)
	if err != nil {
		return "", err
	}
	c.GKE = o.GKE
	if r.sides, err = r.way(ctx, c); err != nil {
		return "", err
	}
	inv, err := cl.API.Inventory(ctx)
	if err != nil {
		return "", err
	}
	pods, err := fleet.PoolPods(ctx, cl.Client, c.Pools)
	if err != nil {
		return "", err
	}
	// Nothing is weighed that cannot serve: a worker whose pod is not
	// Running and Ready, or whose node is NotReady, is neither free nor
	// serving, whatever the substrate says (as this pick read them).
	notReady := map[string]string{}
	if c.ListedFull() {
		for _, n := range c.NodeObjects() {
			if why, down := kube.NodeNotReadyReason(&n); down {
				notReady[n.Name] = why
			}
		}
	}
	fleet.MarkDown(inv, pods, notReady)
	loc := node.NewLocator(c, pods, inv)
	if o.Direction == node.Roll {
		if err := RelabelledAtOnce(c, loc.HalfMoved()); err != nil {
			return "", err
		}
	}
	target := o.Node
	if target == "" {
		if target, err = loc.Next(r.sides); err != nil {
			return "", err
		}
		if target == "" {
			if o.Direction == node.Roll && !o.DryRun {
				return "", RecordEveryNodeReached(ctx, cl.Client, cl.Recorder, c)
			}
			return "", nil
		}
	} else if err := loc.Named(target); err != nil {
		return "", err
	}
	// A node already half-way is out of service: finishing it brings it
	// back, so only a node not begun yet waits for the others.
	if !halfWay(loc, target) {
		if err := OthersDown(c.NodeObjects(), notReady, target); err != nil {
			return "", err
		}
	}
	cfg := o.Config
	cfg.Sides = r.sides
	// During the node's run its own pods are read with each inventory;
	// the other nodes' stay as this pick read them.
	cfg.MarkDown = func(inv *ateapi.Inventory, name string, nodePods []corev1.Pod) {
		fleet.MarkDown(inv, fleet.WithNodePods(pods, name, nodePods), notReady)
	}
	cfg.Pace = node.LatestPace(c.NodeObjects())
	// The node was just listed in full: the first look starts from it
	// (its pods and the inventory are read then).
	r.othersBehind, r.picked = 0, c
	for _, n := range c.Nodes {
		if n.Name != target && n.Version != r.sides.To {
			r.othersBehind++
		}
	}
	r.run.Begin(&cfg, c.ListedNode(target))
	if o.Wait && !r.sides.FirstNode && !o.DryRun {
		if err := r.run.WaitForCapacity(ctx, target, o.WaitTimeout, o.Say); err != nil {
			return "", err
		}
	}
	return target, nil
}

// way is the sides of the move once its preconditions hold: the roll's
// (RollPreconditions), or the rollback's (the control plane first).
func (r *NodeRoll) way(ctx context.Context, c *fleet.Cluster) (node.Sides, error) {
	if r.o.Direction == node.Rollback {
		if len(c.Problems) > 0 {
			return node.Sides{}, runbook.Blocked(fmt.Errorf("the rollback cannot proceed: %s", strings.Join(c.Problems, "; ")))
		}
		if err := r.controlPlaneFirst(ctx, c); err != nil {
			return node.Sides{}, err
		}
		return node.RollbackSides(c)
	}
	deps, err := fleet.Deployments(ctx, r.c.Client)
	if err != nil {
		return node.Sides{}, err
	}
	if deps.Nodes, err = c.FullNodes(ctx, r.c.Client); err != nil {
		return node.Sides{}, err
	}
	if failed := fleet.FailedChecks(RollPreconditions(c, deps, r.o.AllowFullStop)); failed != "" {
		return node.Sides{}, runbook.Blocked(fmt.Errorf("the roll cannot move a node; nothing was changed:\n%s", failed))
	}
	sets, err := clonePullSets(ctx, r.c.Client, c, deps)
	if err != nil {
		return node.Sides{}, err
	}
	probes := pullProbesNeeded(sets, deps.Nodes, c.New)
	if r.o.DryRun {
		for _, p := range probes {
			r.o.Say("would pull the images of %s on %s (%s) before its first node there moves", p.set.pool, p.node.Name, p.platform)
		}
	} else if err := probePulls(ctx, r.c.Client, probes, r.o.Config.PullTimeout, len(c.NodesAt(c.New)) == 0, r.o.Say); err != nil {
		return node.Sides{}, err
	}
	return node.RollSides(c)
}

// controlPlaneFirst refuses to move a node back while step 6 may have
// upgraded the control plane — every node reached NEW once, as recorded
// then (a node that joined at OLD since does not undo it) — unless the run
// is told the OLD API server is back, which it records.
func (r *NodeRoll) controlPlaneFirst(ctx context.Context, c *fleet.Cluster) error {
	if c.New == "" {
		return nil
	}
	if !r.o.DryRun {
		if err := RecordEveryNodeReached(ctx, r.c.Client, r.c.Recorder, c); err != nil {
			return err
		}
	}
	when, mayBeNew := c.ControlPlaneMayBeNew()
	if !mayBeNew && !c.AllAt(c.New) {
		return nil
	}
	first := ControlPlaneFirst(c.Old)
	if mayBeNew && !r.o.DryRun {
		if err := RecordStep6Seen(ctx, r.c.Client, r.c.Recorder, c); err != nil {
			return err
		}
	}
	if r.o.ControlPlaneReverted {
		// Told, but what can be seen says otherwise: the flag is a fact
		// about the cluster, not a way past the gate.
		if why := c.StillAfterStep6(); why != "" {
			return runbook.Blocked(fmt.Errorf("--control-plane-reverted, but %s; nothing was changed. From a checkout of the "+
				"OLD release run:\n    %s\nthen re-run", why, first.Command))
		}
		if mayBeNew && !r.o.DryRun {
			return RecordControlPlaneReverted(ctx, r.c.Client, r.c.Recorder, c)
		}
		return nil
	}
	since := "every node is at " + c.New
	if mayBeNew && !c.AllAt(c.New) {
		since = fmt.Sprintf("every node reached %s at %s (recorded on DaemonSet %s; %d node(s) at %s now, which joined or moved "+
			"back since)", c.New, when.Format(time.RFC3339), c.NewAtelet().Name, len(c.NodesAt(c.Old)), c.Old)
	}
	step6 := "so step 6 may have upgraded the control plane"
	if s := c.Step6(); s.Ran {
		step6 = "and step 6 upgraded the control plane: " + s.String()
	}
	return runbook.Blocked(fmt.Errorf("%s, %s; nothing was changed. From a checkout "+
		"of the OLD release run:\n    %s\nthen re-run with --control-plane-reverted (pass it too if step 6 never ran)", since,
		step6, first.Command))
}

// settle records, after a run that moved one node, that every node is at
// NEW if it now is: the fact the rollback's "control plane first" rests on
// is written when it becomes true.
func (r *NodeRoll) settle(ctx context.Context) {
	if r.o.Direction != node.Roll || r.o.DryRun || r.o.Node == "" && r.o.All || r.othersBehind > 0 || r.picked == nil {
		return
	}
	// The atelets and pools as the pick read them (a move changes
	// neither), the nodes read again: one joined at the old version since
	// the pick keeps the fact from being recorded.
	nodes, err := kube.ListNodesLight(ctx, nil, r.c.Client, "")
	if err == nil {
		err = RecordEveryNodeReached(ctx, r.c.Client, r.c.Recorder, r.picked.WithNodes(nodes))
	}
	if err != nil {
		r.o.Say("could not record whether every node is at the new version: %v (the next run records it)", err)
	}
}

// rollHealth is the soak's check: no actor CRASHED, and every worker of the
// pools the roll moves to ACTIVE.
func rollHealth(api node.API, sides node.Sides) func(ctx context.Context) error {
	to := map[string]bool{}
	for _, p := range sides.ToPools {
		to[p.Key()] = true
	}
	return func(ctx context.Context) error {
		inv, err := api.Inventory(ctx)
		if err != nil {
			return err
		}
		var problems []string
		for _, a := range inv.Actors {
			if a.State == ateapi.ActorCrashed {
				problems = append(problems, fmt.Sprintf("actor %s/%s is CRASHED", a.Atespace, a.Name))
			}
		}
		for _, w := range inv.Workers {
			if to[w.PoolKey()] && w.State != ateapi.WorkerActive {
				problems = append(problems, fmt.Sprintf("worker %s of %s is %s", w.Name, w.PoolKey(), w.State))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	}
}

// halfWay says whether node is already out of service by a move: one
// standing half-way, or one whose every worker was drained.
func halfWay(loc *node.Locator, name string) bool {
	for _, m := range loc.HalfMoved() {
		if m.Node == name {
			return true
		}
	}
	for _, d := range loc.Drained() {
		if d.Node == name && d.Serving == 0 {
			return true
		}
	}
	return false
}
