package ateapi

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollbook/rollbook/pkg/protopath"
)

// Request builders set fields by name on the server's own request
// descriptors, so renumbered or renamed request fields (actor_id → actor_ref
// → actor) never put unknown fields on the wire.

func workerRef(name string) func(protoreflect.Message) {
	return func(req protoreflect.Message) {
		if !protopath.Set(req, "worker.name", name) {
			protopath.Set(req, "name", name)
		}
	}
}

func actorRef(atespace, name string) func(protoreflect.Message) {
	return func(req protoreflect.Message) {
		for _, p := range []string{"actor", "actor_ref"} {
			if protopath.Has(req.Descriptor(), p+".name") {
				protopath.Set(req, p+".atespace", atespace)
				protopath.Set(req, p+".name", name)
				return
			}
		}
		protopath.Set(req, "actor_id", name)
		protopath.Set(req, "atespace", atespace)
	}
}

func pageRequest(size int32, token, atespace string) func(protoreflect.Message) {
	return func(req protoreflect.Message) {
		protopath.Set(req, "page_size", size)
		if token != "" {
			protopath.Set(req, "page_token", token)
		}
		if atespace != "" {
			protopath.Set(req, "atespace", atespace)
		}
	}
}
