package ate

import (
	"context"
	"errors"
	"fmt"
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
	Config        NodeConfig
	// Soak watches the roll's health this long after the first Canary
	// nodes, or (Canary 0) after every node, before the next one.
	Soak   time.Duration
	Canary int
}

// Mover is what moving nodes works with: one session's clients, recorder
// and progress.
type Mover struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	API      API
	Recorder kube.Recorder
	Say      func(format string, a ...any)
	Reporter runbook.Reporter
	// Paused is asked before each node starts (kubectl ate pause).
	Paused func(ctx context.Context) (bool, string)
	// OnHealthFailure records a failed soak (it pauses the roll).
	OnHealthFailure func(ctx context.Context, why string)
	RunID           string
	DryRun          bool
}

// MoveNodes moves one node (the given one, or the next) or, with All, every
// remaining node, one at a time, re-reading the cluster between nodes. It
// refuses (runbook.Blocked, nothing changed) when the roll's preconditions
// do not hold or another node is half-moved.
func MoveNodes(ctx context.Context, m Mover, o MoveOptions) (runbook.Result, error) {
	total := runbook.Result{Runbook: NodeRunbookName, RunID: m.RunID, DryRun: m.DryRun, Outcome: runbook.OutcomeDone}
	if m.DryRun {
		total.Outcome = runbook.OutcomePlanned
	}
	moved := 0
	for {
		c, err := ObserveCluster(ctx, m.Client, m.Dynamic)
		if err != nil {
			return total, err
		}
		sides, err := m.sides(ctx, c, o)
		if err != nil {
			return total, err
		}
		inv, err := m.API.Inventory(ctx)
		if err != nil {
			return total, err
		}
		fromPods, err := PoolPods(ctx, m.Client, sides.FromPools)
		if err != nil {
			return total, err
		}
		half := HalfMoved(c, sides.From, sides.To, sides.FromPools, fromPods, inv)
		target := o.Node
		if target == "" {
			target = NextNode(c, sides.From, sides.To, sides.FromPools, fromPods, inv)
		} else if len(half) > 0 && !contains(half, target) {
			return total, runbook.Blocked(fmt.Errorf("node %s is half-moved (its workers are draining, or old-pool pods are left on it): "+
				"one node at a time, so finish it first with the same command and no NODE, or name %s", half[0], half[0]))
		}
		if target == "" {
			m.Say("every node is at %s", sides.To)
			return total, nil
		}
		cfg := o.Config
		cfg.Sides, cfg.RunID = sides, m.RunID
		// One observer for the node: its step clocks (written through the
		// target) are node writes it remembers too.
		obs := newNodeObserver(m.Client, m.API, &cfg)
		// The node was just listed in full: the first look starts from it
		// (its pods and the inventory are read then).
		obs.seed(c.nodeObject(target))
		if o.Wait && !sides.FirstNode && !m.DryRun {
			if err := waitForCapacity(ctx, obs, target, o.WaitTimeout, m.Say); err != nil {
				return total, err
			}
		}
		m.Say("node %s: %s → %s", target, sides.From, sides.To)
		res := runbook.Run(ctx, nodeRunbook(obs, m.Recorder),
			[]runbook.Target{runbook.NodeTarget{Client: obs.cs, Node: target}},
			runbook.Options{RunID: m.RunID, DryRun: m.DryRun, Reporter: m.Reporter, Paused: m.Paused})
		obs.close()
		total.Targets = append(total.Targets, res.Targets...)
		total.Outcome = runbook.Worst(total.Outcome, res.Outcome)
		if !o.All || m.DryRun || res.Outcome != runbook.OutcomeDone || o.Node != "" {
			return total, nil
		}
		moved++
		if o.Soak > 0 && (o.Canary == 0 || moved == o.Canary) {
			if why := runbook.Soak(ctx, o.Soak, rollHealth(m.API, sides), m.Reporter); why != "" {
				if m.OnHealthFailure != nil {
					m.OnHealthFailure(ctx, why)
				}
				total.Outcome = runbook.Worst(total.Outcome, runbook.OutcomePaused)
				return total, nil
			}
		}
	}
}

func (m Mover) sides(ctx context.Context, c *Cluster, o MoveOptions) (Sides, error) {
	if o.Direction == Rollback {
		return RollbackSides(c)
	}
	deps, err := Deployments(ctx, m.Client)
	if err != nil {
		return Sides{}, err
	}
	if failed := FailedChecks(RollPreconditions(c, deps, o.AllowFullStop)); failed != "" {
		return Sides{}, runbook.Blocked(fmt.Errorf("the roll cannot move a node; nothing was changed:\n%s", failed))
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
		if f.flipped() || f.drained() {
			o.saw(f)
			return true, nil // the drain step is done: its guard no longer applies
		}
		needs, ok := f.capacity()
		if !ok {
			if d := describeNeeds(needs); d != last {
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
