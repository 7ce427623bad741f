package ateapi

import (
	"context"
	"errors"
	"sort"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollbook/rollbook/pkg/protopath"
)

// probeName names what cannot exist: a probe's call is answered NotFound
// (or InvalidArgument) when it is allowed, and changes nothing.
const probeName = "rollbook-permission-probe"

// Atespaces lists every atespace (upstream's unpaged ListAtespaces); ok is
// false when the server has no such method (an era before it).
func (c *Client) Atespaces(ctx context.Context) (names []string, ok bool, err error) {
	if !c.Capabilities().Has("ListAtespaces") {
		return nil, false, nil
	}
	resp, err := c.call(ctx, "ListAtespaces", "", func(protoreflect.Message) {})
	if err != nil {
		return nil, true, err
	}
	for _, m := range protopath.List(resp, "atespaces") {
		names = append(names, protopath.String(m, "name"))
	}
	return names, true, nil
}

// Refusal is a call authorization refuses this client, and where.
type Refusal struct {
	Method   string `json:"method"`
	Atespace string `json:"atespace,omitempty"`
}

func (r Refusal) String() string {
	if r.Atespace == "" {
		return r.Method
	}
	return r.Method + " in atespace " + r.Atespace
}

// ProbeMove asks, before a node's move writes anything, whether this
// client may make every call the move makes: DrainWorker, and in every
// atespace (those given, and every one ListAtespaces names) ListActors
// and SuspendActor. Each probe names what cannot exist, so it changes
// nothing: an authorizer decides on the method and atespace before the
// object is looked up, so an allowed call is answered NotFound (or
// InvalidArgument) and a refused one PermissionDenied. It returns the
// refusals, and the atespaces it probed.
func (c *Client) ProbeMove(ctx context.Context, atespaces []string) (refused []Refusal, probed []string, err error) {
	allowed := func(err error) (bool, error) {
		switch {
		case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrFailedPrecondition):
			return true, nil
		case errors.Is(err, ErrPermissionDenied):
			return false, nil
		}
		return false, err
	}
	// A server whose DrainWorker is absent or a stub is never asked to
	// drain: the move deletes the worker's pod instead.
	if caps := c.Capabilities(); caps.Has("DrainWorker") && caps.DrainImplemented {
		_, err := c.DrainWorker(ctx, probeName)
		if errors.Is(err, ErrUnimplemented) {
			err = nil
		}
		ok, err := allowed(err)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			refused = append(refused, Refusal{Method: "DrainWorker"})
		}
	}
	set := map[string]bool{}
	for _, a := range atespaces {
		set[a] = true
	}
	names, listed, err := c.Atespaces(ctx)
	if listed {
		ok, aerr := allowed(err)
		if aerr != nil {
			return nil, nil, aerr
		}
		if !ok {
			refused = append(refused, Refusal{Method: "ListAtespaces"})
		}
		for _, a := range names {
			set[a] = true
		}
	}
	for a := range set {
		probed = append(probed, a)
	}
	sort.Strings(probed)
	for _, a := range probed {
		_, err := c.call(ctx, "ListActors", a, pageRequest(1, "", a))
		ok, err := allowed(err)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			refused = append(refused, Refusal{Method: "ListActors", Atespace: a})
		}
		_, err = c.call(ctx, "SuspendActor", a+"/"+probeName, actorRef(a, probeName))
		if ok, err = allowed(err); err != nil {
			return nil, nil, err
		} else if !ok {
			refused = append(refused, Refusal{Method: "SuspendActor", Atespace: a})
		}
	}
	return refused, probed, nil
}
