package ateapi

import (
	"context"
	"errors"
	"maps"
	"slices"

	"golang.org/x/sync/errgroup"
)

// Inventory is one consistent-enough view of workers and actors, cross-
// linked by Resolve.
type Inventory struct {
	Workers []Worker
	Actors  []Actor
	// Unreadable maps each atespace the client may not read (a worker
	// names an actor there, and reading it is PermissionDenied) to the
	// server's answer. An authorization policy may filter a list over
	// every atespace to what the caller may see: the actors of such an
	// atespace, paused ones included, are then missing from Actors.
	Unreadable map[string]string `json:",omitempty"`
}

// Inventory lists all workers and actors and links them.
func (c *Client) Inventory(ctx context.Context) (*Inventory, error) {
	// The two lists are independent: fetch them together.
	var ws []Worker
	var as []Actor
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { ws, err = c.ListWorkers(gctx); return err })
	g.Go(func() (err error) { as, err = c.ListActors(gctx, ""); return err })
	if err := g.Wait(); err != nil {
		return nil, err
	}
	unreadable, err := c.unreadableAtespaces(ctx, ws, as)
	if err != nil {
		return nil, err
	}
	Resolve(ws, as)
	return &Inventory{Workers: ws, Actors: as, Unreadable: unreadable}, nil
}

// unreadableAtespaces reads one actor of each atespace that workers name
// but the actor list has none of: an atespace listed is readable, and a
// soft list rarely leaves out every actor of one, so this costs a call
// only where the list may have been filtered.
func (c *Client) unreadableAtespaces(ctx context.Context, ws []Worker, as []Actor) (map[string]string, error) {
	listed := map[string]bool{}
	for _, a := range as {
		listed[a.Atespace] = true
	}
	var out map[string]string
	for _, w := range ws {
		for _, r := range w.Actors {
			if listed[r.Atespace] {
				continue
			}
			listed[r.Atespace] = true // one read per atespace
			_, err := c.GetActor(ctx, r.Atespace, r.Name)
			switch {
			case errors.Is(err, ErrPermissionDenied):
				if out == nil {
					out = map[string]string{}
				}
				out[r.Atespace] = err.Error()
			case err != nil && !errors.Is(err, ErrNotFound):
				return nil, err
			}
		}
	}
	return out, nil
}

// UnreadableAtespaces lists inv.Unreadable's atespaces, sorted.
func (inv *Inventory) UnreadableAtespaces() []string {
	return slices.Sorted(maps.Keys(inv.Unreadable))
}

// Resolve fills the links each era leaves out: an actor's worker from the
// worker's assignment (era B names the actor only there), an actor's node and
// pool from its worker, and each worker's actor list from the actors.
func Resolve(workers []Worker, actors []Actor) {
	byName := make(map[string]*Worker, len(workers))
	for i := range workers {
		byName[workers[i].Name] = &workers[i]
	}
	byActor := map[ActorRef]*Worker{}
	for i := range workers {
		for _, r := range workers[i].Actors {
			byActor[r] = &workers[i]
		}
	}
	for i := range actors {
		a := &actors[i]
		if a.Worker == "" {
			if w, ok := byActor[a.Ref()]; ok && a.State != ActorSuspended {
				a.Worker = w.Name
			}
		}
		w, ok := byName[a.Worker]
		if !ok {
			if a.Node == "" {
				a.Node = a.AssignedNode
			}
			continue
		}
		if a.Node == "" {
			a.Node = w.Node
		}
		if a.Pool == "" {
			a.Pool = w.Pool
		}
		if a.Pod == "" {
			a.Pod = w.Pod
		}
		if !slices.Contains(w.Actors, a.Ref()) {
			w.Actors = append(w.Actors, a.Ref())
		}
	}
}

// WorkersOnNode returns the workers whose pods run on node.
func (inv *Inventory) WorkersOnNode(node string) []Worker {
	var out []Worker
	for _, w := range inv.Workers {
		if w.Node == node {
			out = append(out, w)
		}
	}
	return out
}

// ActorsOnNode returns the runbook's residents of node: actors bound to a
// worker there, pinned there, or holding a local snapshot there.
func (inv *Inventory) ActorsOnNode(node string) []Actor {
	var out []Actor
	for _, a := range inv.Actors {
		if a.OnNode(node) {
			out = append(out, a)
		}
	}
	return out
}
