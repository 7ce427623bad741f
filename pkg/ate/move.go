package ate

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Direction says which way nodes move.
type Direction int

// Roll is OLD → NEW; Rollback is NEW → OLD.
const (
	Roll Direction = iota
	Rollback
)

// MoveOptions choose the nodes to move and how.
type MoveOptions struct {
	Direction Direction
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
	Config               NodeConfig
}

// Mover is what moving nodes works with: one session's clients and
// recorder. The session runs the move (cli.RunSource): its progress, pause,
// soak, journal and lock are the session's own.
type Mover struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	API      API
	Recorder kube.Recorder
	Say      func(format string, a ...any)
	DryRun   bool
}

// Move is the node roll (or rollback) as a target source: before each node
// it reads the cluster again and takes the node the node runbook's own
// positions say comes next (Locator.Next), so `--all`, a re-run after any
// interruption and `kubectl ate status` agree on it. One runbook serves
// every node of the run; its observer is set to each node as it starts.
type Move struct {
	m   Mover
	o   MoveOptions
	obs *nodeObserver
	rb  *runbook.Runbook[nodeFacts]
	// sides are the way the last node picked moved; err why the source
	// stopped early (a refusal, nothing changed on that node).
	sides Sides
	err   error
}

// NewMove prepares moving nodes the way o says.
func NewMove(m Mover, o MoveOptions) *Move {
	cfg := o.Config
	obs := newNodeObserver(m.Client, m.API, &cfg)
	return &Move{m: m, o: o, obs: obs, rb: nodeRunbook(obs, m.Recorder)}
}

// Runbook is the node runbook every node of the move runs.
func (mv *Move) Runbook() *runbook.Runbook[nodeFacts] { return mv.rb }

// Err is why the move stopped before a node it would have taken (nil when
// it ran out of nodes or the run stopped).
func (mv *Move) Err() error { return mv.err }

// Health is the soak's check: no actor CRASHED, and every worker of the
// pools the move goes to ACTIVE.
func (mv *Move) Health(ctx context.Context) error { return rollHealth(mv.m.API, mv.sides)(ctx) }

// Nodes yields the nodes to move, each picked once the one before ended.
func (mv *Move) Nodes(ctx context.Context) iter.Seq[runbook.Target] {
	return func(yield func(runbook.Target) bool) {
		defer mv.obs.close()
		for first := true; ; first = false {
			if !first && (!mv.o.All || mv.m.DryRun || mv.o.Node != "") {
				return
			}
			target, err := mv.pick(ctx)
			if err != nil {
				mv.err = err
				return
			}
			if target == "" {
				mv.m.Say("every node is at %s", mv.sides.To)
				return
			}
			mv.m.Say("node %s: %s → %s", target, mv.sides.From, mv.sides.To)
			if !yield(runbook.NodeTarget{Client: mv.obs.cs, Node: target}) {
				return
			}
		}
	}
}

// pick reads the cluster, checks the way's preconditions and returns the
// next node ("" when every node is there), its observer set to it.
func (mv *Move) pick(ctx context.Context) (string, error) {
	m, o := mv.m, mv.o
	c, err := ObserveCluster(ctx, m.Client, m.Dynamic)
	if err != nil {
		return "", err
	}
	if mv.sides, err = mv.way(ctx, c); err != nil {
		return "", err
	}
	inv, err := m.API.Inventory(ctx)
	if err != nil {
		return "", err
	}
	pods, err := PoolPods(ctx, m.Client, c.Pools)
	if err != nil {
		return "", err
	}
	loc := NewLocator(c, pods, inv)
	target := o.Node
	if target == "" {
		if target, err = loc.Next(mv.sides); err != nil || target == "" {
			return "", err
		}
	} else if moves := loc.Moves(); len(moves) > 0 && moves[0].Node != target {
		return "", runbook.Blocked(fmt.Errorf("%s: one node at a time, so finish it first with %s and no NODE, or name %s",
			moves[0], moves[0].Next(), moves[0].Node))
	}
	cfg := o.Config
	cfg.Sides = mv.sides
	cfg.Pace = LatestPace(c.objects)
	// The node was just listed in full: the first look starts from it
	// (its pods and the inventory are read then).
	mv.obs.begin(&cfg, c.nodeObject(target))
	if o.Wait && !mv.sides.FirstNode && !m.DryRun {
		if err := waitForCapacity(ctx, mv.obs, target, o.WaitTimeout, m.Say); err != nil {
			return "", err
		}
	}
	return target, nil
}

// way is the sides of the move once its preconditions hold: the roll's
// (RollPreconditions), or the rollback's (the control plane first).
func (mv *Move) way(ctx context.Context, c *Cluster) (Sides, error) {
	if mv.o.Direction == Rollback {
		if len(c.Problems) > 0 {
			return Sides{}, runbook.Blocked(fmt.Errorf("the rollback cannot proceed: %s", strings.Join(c.Problems, "; ")))
		}
		if c.New != "" && atVersion(c, c.New) && !mv.o.ControlPlaneReverted {
			first := ControlPlaneFirst(c.Old)
			return Sides{}, runbook.Blocked(fmt.Errorf("every node is at %s, so step 6 may have upgraded the control plane; "+
				"nothing was changed. From a checkout of the OLD release run:\n    %s\nthen re-run with --control-plane-reverted "+
				"(pass it too if step 6 never ran)", c.New, first.Command))
		}
		return RollbackSides(c)
	}
	deps, err := Deployments(ctx, mv.m.Client)
	if err != nil {
		return Sides{}, err
	}
	if deps.Nodes, err = c.fullNodes(ctx, mv.m.Client); err != nil {
		return Sides{}, err
	}
	if failed := FailedChecks(RollPreconditions(c, deps, mv.o.AllowFullStop)); failed != "" {
		return Sides{}, runbook.Blocked(fmt.Errorf("the roll cannot move a node; nothing was changed:\n%s", failed))
	}
	sets, err := clonePullSets(ctx, mv.m.Client, c, deps)
	if err != nil {
		return Sides{}, err
	}
	probes := pullProbesNeeded(sets, deps.Nodes, c.New)
	if mv.m.DryRun {
		for _, p := range probes {
			mv.m.Say("would pull the images of %s on %s (%s) before its first node there moves", p.set.pool, p.node.Name, p.platform)
		}
	} else if err := probePulls(ctx, mv.m.Client, probes, mv.o.Config.PullTimeout, len(c.NodesAt(c.New)) == 0, mv.m.Say); err != nil {
		return Sides{}, err
	}
	return RollSides(c)
}

// WaitForCapacity polls the substrate (it has no watch) until the node's
// actors have enough free workers of their pool lineage elsewhere, or the
// node is already drained.
func WaitForCapacity(ctx context.Context, cs kubernetes.Interface, api API, cfg *NodeConfig, node string, limit time.Duration,
	say func(string, ...any)) error {
	return waitForCapacity(ctx, newNodeObserver(cs, api, cfg), node, limit, say)
}

// waitForCapacity is WaitForCapacity through o; the observation that ends
// the wait is the node runbook's first (it changed nothing).
func waitForCapacity(ctx context.Context, o *nodeObserver, node string, limit time.Duration, say func(string, ...any)) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, limit, true, func(ctx context.Context) (bool, error) {
		f, err := o.look(ctx, node)
		if err != nil {
			return false, err
		}
		if !f.takingBack() && (f.flipped() || f.drained()) {
			o.saw(f)
			return true, nil // the drain step is done: its guard no longer applies
		}
		needs, ok := f.capacity()
		if !ok {
			d := describeNeeds(needs)
			if u, err := unplacedWorkerPods(ctx, o.cs, f.cfg.Sides, needs); err != nil {
				return false, err
			} else if u != "" {
				d += "; " + u + ": they register as workers once a node at " + f.cfg.To + " has room for them"
			}
			if d != last {
				say("waiting for free workers before draining %s: %s", node, d)
				last = d
			}
		}
		if ok {
			o.saw(f)
		}
		return ok, nil
	})
	if err != nil && ctx.Err() == nil {
		return runbook.Blocked(fmt.Errorf("not enough free workers for the actors on %s within %s (%s)", node, limit, last))
	}
	return err
}

// rollHealth is the soak's check: no actor CRASHED, and every worker of the
// pools the roll moves to ACTIVE.
func rollHealth(api API, sides Sides) func(ctx context.Context) error {
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
