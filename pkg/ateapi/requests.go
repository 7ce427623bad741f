package ateapi

import "google.golang.org/protobuf/reflect/protoreflect"

// Request builders set fields by name on the server's own request
// descriptors, so renumbered or renamed request fields (actor_id → actor_ref
// → actor) never put unknown fields on the wire.

func workerRef(name string) func(protoreflect.Message) {
	return func(req protoreflect.Message) {
		if !setStr(req, "worker.name", name) {
			setStr(req, "name", name)
		}
	}
}

func actorRef(atespace, name string) func(protoreflect.Message) {
	return func(req protoreflect.Message) {
		for _, p := range []string{"actor", "actor_ref"} {
			if schemaHas(req.Descriptor(), p+".name") {
				setStr(req, p+".atespace", atespace)
				setStr(req, p+".name", name)
				return
			}
		}
		setStr(req, "actor_id", name)
		setStr(req, "atespace", atespace)
	}
}

func pageRequest(size int32, token, atespace string) func(protoreflect.Message) {
	return func(req protoreflect.Message) {
		setInt32(req, "page_size", size)
		if token != "" {
			setStr(req, "page_token", token)
		}
		if atespace != "" {
			setStr(req, "atespace", atespace)
		}
	}
}
