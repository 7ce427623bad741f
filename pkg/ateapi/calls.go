package ateapi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollbook/rollbook/pkg/protopath"
)

// listAll follows next_page_token until it is empty, handing each item to
// each as its page arrives: the next page is fetched while this one is
// decoded. Pages stay encoded and an item is read where it lies, through
// messages from one arena reused item after item, so each must not keep
// the message it is handed (the decoders copy what they read). Pages may
// be empty while a token remains; MaxPages stops a server that never ends.
func (c *Client) listAll(ctx context.Context, method, target, field string,
	fill func(protoreflect.Message), each func(protoreflect.Message)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan protoreflect.Message, 1)
	errc := make(chan error, 1)
	go func() {
		defer close(pages)
		token := ""
		for page := 1; ; page++ {
			if page > c.opts.MaxPages {
				errc <- fmt.Errorf("ateapi: %s: no last page after %d pages: %w", method, c.opts.MaxPages, ErrTooManyPages)
				return
			}
			resp, err := c.callAs(ctx, method, target, func(req protoreflect.Message) {
				fill(req)
				pageRequest(c.opts.PageSize, token, "")(req)
			}, true)
			if err != nil {
				errc <- err
				return
			}
			// Read before the page is handed over: from then on it is the
			// decoder's alone.
			token = protopath.String(resp, "next_page_token")
			select {
			case pages <- resp:
			case <-ctx.Done():
				return
			}
			if token == "" {
				return
			}
		}
	}()
	var arena wireArena
	for resp := range pages {
		fd := resp.Descriptor().Fields().ByName(protoreflect.Name(field))
		wm, ok := resp.(*wireMessage)
		if !ok || fd == nil || !fd.IsList() || fd.Kind() != protoreflect.MessageKind {
			for _, m := range protopath.List(resp, field) {
				each(m)
			}
			continue
		}
		wm.occurrences(fd.Number(), func(typ protowire.Type, v []byte, _ uint64) {
			if typ == protowire.BytesType {
				each(arena.message(fd.Message(), v))
				arena.reset()
			}
		})
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// ListWorkers lists every worker. In era D each worker's actors come from
// ListWorkerActorAssignments (one extra call per worker).
func (c *Client) ListWorkers(ctx context.Context) ([]Worker, error) {
	return relisted(c, func() ([]Worker, error) { return c.listWorkers(ctx) })
}

// relisted runs list again when the descriptors changed while it ran: its
// pages (and, in era D, the assignments) must all come from one API server,
// and a method the new one lacks (ListWorkerActorAssignments before era D)
// fails the old plan, not the list.
func relisted[T any](c *Client, list func() ([]T, error)) ([]T, error) {
	for i := 0; ; i++ {
		before := c.res.Load().sum
		out, err := list()
		if c.res.Load().sum == before || i == maxRelearn {
			return out, err
		}
	}
}

func (c *Client) listWorkers(ctx context.Context) ([]Worker, error) {
	seen := map[string]bool{}
	var out []Worker
	err := c.listAll(ctx, "ListWorkers", "", "workers", func(protoreflect.Message) {}, func(m protoreflect.Message) {
		w := decodeWorker(m)
		if !seen[w.Name] { // lists are "soft": an item may repeat
			seen[w.Name] = true
			out = append(out, w)
		}
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		if err := c.fillAssignments(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *Client) fillAssignments(ctx context.Context, w *Worker) error {
	if !c.Capabilities().Has("ListWorkerActorAssignments") {
		return nil
	}
	var refs []ActorRef
	err := c.listAll(ctx, "ListWorkerActorAssignments", w.Name, "actor_assignments", workerRef(w.Name), func(m protoreflect.Message) {
		refs = append(refs, ActorRef{Atespace: protopath.String(m, "actor.atespace"), Name: protopath.String(m, "actor.name")})
	})
	if errors.Is(err, ErrNotFound) {
		return nil // the worker went away after the list
	}
	if err != nil {
		return err
	}
	w.Actors = append(w.Actors, refs...)
	return nil
}

// ListActors lists actors in atespace, or in all atespaces when empty,
// de-duplicated by UID (or atespace/name).
func (c *Client) ListActors(ctx context.Context, atespace string) ([]Actor, error) {
	return relisted(c, func() ([]Actor, error) { return c.listActors(ctx, atespace) })
}

func (c *Client) listActors(ctx context.Context, atespace string) ([]Actor, error) {
	seen := map[string]bool{}
	// Pages of actors, joined once at the end: appending 50,000 actors to
	// one slice reallocates it to about five times its final size in all.
	var chunks [][]Actor
	var chunk []Actor
	n := 0
	strs := interner{}
	err := c.listAll(ctx, "ListActors", atespace, "actors", pageRequest(0, "", atespace), func(m protoreflect.Message) {
		a := decodeActor(m)
		key := a.UID
		if key == "" {
			key = a.Ref().String()
		}
		if seen[key] {
			return
		}
		seen[key] = true
		// Atespaces, workers, pools, pods and nodes repeat across actors:
		// one copy of each stays live.
		for _, p := range []*string{&a.Atespace, &a.Worker, &a.Pool, &a.Pod, &a.Node, &a.AssignedNode} {
			*p = strs.intern(*p)
		}
		if len(chunk) == cap(chunk) {
			if len(chunk) > 0 {
				chunks = append(chunks, chunk)
			}
			chunk = make([]Actor, 0, max(int(c.opts.PageSize), 1))
		}
		chunk = append(chunk, a)
		n++
	})
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]Actor, 0, n)
	for _, ch := range append(chunks, chunk) {
		out = append(out, ch...)
	}
	return out, nil
}

// GetWorker returns one worker by name (pod UID). Servers without GetWorker
// (era B) are answered from ListWorkers.
func (c *Client) GetWorker(ctx context.Context, name string) (Worker, error) {
	// Relisted too: in era D the worker and its assignments must come from
	// one API server, and a server rolled between the two calls (to one
	// without ListWorkerActorAssignments) fails the old plan, not the get.
	ws, err := relisted(c, func() ([]Worker, error) {
		w, err := c.getWorker(ctx, name)
		return []Worker{w}, err
	})
	return ws[0], err
}

func (c *Client) getWorker(ctx context.Context, name string) (Worker, error) {
	if !c.Capabilities().Has("GetWorker") {
		all, err := c.ListWorkers(ctx)
		if err != nil {
			return Worker{}, err
		}
		for _, w := range all {
			if w.Name == name {
				return w, nil
			}
		}
		return Worker{}, &Error{Method: "GetWorker", Target: name, Code: codes.NotFound, Message: "Worker " + name + " not found",
			Attempts: 1}
	}
	resp, err := c.call(ctx, "GetWorker", name, workerRef(name))
	if err != nil {
		return Worker{}, err
	}
	w := decodeWorker(unwrapOr(resp, "Worker", "worker"))
	return w, c.fillAssignments(ctx, &w)
}

// DrainWorker marks a worker DRAINING (idempotent, one-way). It fails with
// ErrUnimplemented when the server lacks it or serves a stub.
func (c *Client) DrainWorker(ctx context.Context, name string) (Worker, error) {
	resp, err := c.call(ctx, "DrainWorker", name, workerRef(name))
	if err != nil {
		return Worker{}, err
	}
	return decodeWorker(unwrapOr(resp, "Worker", "worker")), nil
}

// GetActor returns one actor.
func (c *Client) GetActor(ctx context.Context, atespace, name string) (Actor, error) {
	return c.actorCall(ctx, "GetActor", atespace, name)
}

// SuspendActor suspends an actor (RUNNING/PAUSED → SUSPENDED; SUSPENDED is
// a no-op). FailedPrecondition errors carry the actor's state.
func (c *Client) SuspendActor(ctx context.Context, atespace, name string) (Actor, error) {
	return c.actorCall(ctx, "SuspendActor", atespace, name)
}

// RevertActor returns a RUNNING/PAUSED/CRASHED actor to SUSPENDED at its
// last external snapshot, discarding later work.
func (c *Client) RevertActor(ctx context.Context, atespace, name string) (Actor, error) {
	return c.actorCall(ctx, "RevertActor", atespace, name)
}

// ResumeActor places a SUSPENDED/PAUSED actor on a free worker; resumed is
// false when it was already RUNNING.
func (c *Client) ResumeActor(ctx context.Context, atespace, name string) (a Actor, resumed bool, err error) {
	resp, err := c.call(ctx, "ResumeActor", atespace+"/"+name, actorRef(atespace, name))
	if err != nil {
		return Actor{}, false, c.withActorState(ctx, err, atespace, name)
	}
	return decodeActor(unwrapOr(resp, "Actor", "actor")), protopath.Bool(resp, "resumed"), nil
}

func (c *Client) actorCall(ctx context.Context, method, atespace, name string) (Actor, error) {
	resp, err := c.call(ctx, method, atespace+"/"+name, actorRef(atespace, name))
	if err != nil {
		return Actor{}, c.withActorState(ctx, err, atespace, name)
	}
	return decodeActor(unwrapOr(resp, "Actor", "actor")), nil
}

// withActorState adds the actor's state to a FailedPrecondition: from the
// server's text when it says "got: X", else by reading the actor.
func (c *Client) withActorState(ctx context.Context, err error, atespace, name string) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.FailedPrecondition {
		return err
	}
	if e.ActorState = stateFromMessage(e.Message); e.ActorState != "" {
		return e
	}
	ctx, cancel := context.WithTimeout(ctx, followUpTimeout)
	defer cancel()
	if resp, gerr := c.call(ctx, "GetActor", atespace+"/"+name, actorRef(atespace, name)); gerr == nil {
		e.ActorState = decodeActor(unwrapOr(resp, "Actor", "actor")).State
	}
	return e
}

// unwrapOr is unwrap that falls back to an empty view rather than nil.
func unwrapOr(resp protoreflect.Message, typeName protoreflect.Name, field string) protoreflect.Message {
	if m := unwrap(resp, typeName, field); m != nil {
		return m
	}
	return resp
}

// interner keeps one copy of each string.
type interner map[string]string

func (in interner) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in[s]; ok {
		return v
	}
	in[s] = s
	return s
}
