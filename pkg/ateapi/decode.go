package ateapi

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollbook/rollbook/pkg/atestate"
	"github.com/rollbook/rollbook/pkg/protopath"
)

// decodeWorker reads a Worker of any era (Era; the protos are in
// internal/fakesubstrate/protos): flat (B), resource style with
// status.assignment (C), or with capacity/allocated (D).
func decodeWorker(m protoreflect.Message) Worker {
	w := Worker{
		// Before era C the worker had no metadata; its identity is the pod UID.
		Name:            protopath.String(m, "metadata.name", "worker_pod_uid"),
		Namespace:       protopath.String(m, "worker_namespace"),
		Pool:            protopath.String(m, "worker_pool"),
		Pod:             protopath.String(m, "worker_pod"),
		PodUID:          protopath.String(m, "worker_pod_uid"),
		Node:            protopath.String(m, "node_name"),
		IPs:             protopath.Strings(m, "ips", "ip"),
		SandboxClass:    protopath.String(m, "sandbox_class"),
		Labels:          protopath.StringMap(m, "labels"),
		State:           atestate.ParseWorkerState(protopath.EnumName(m, "status.state", "state")),
		Version:         protopath.Int(m, "metadata.version", "version"),
		CapacityActors:  int(protopath.Int(m, "status.capacity.actors")),
		AllocatedActors: int(protopath.Int(m, "status.allocated.actors")),
		Slots:           protopath.Has(m.Descriptor(), "status.capacity.actors"),
	}
	for _, p := range []string{"status.assignment.actor", "assignment.actor"} {
		if ref := protopath.Message(m, p); ref != nil {
			r := ActorRef{Atespace: protopath.String(ref, "atespace"), Name: protopath.String(ref, "name", "actor_id")}
			if r.Name != "" {
				w.Actors = append(w.Actors, r)
			}
			break
		}
	}
	return w
}

// decodeActor reads an Actor of any era: metadata + Status enum (B), or
// ActorStatus with worker_assignment, local_snapshot(_info), assigned_node.
func decodeActor(m protoreflect.Message) Actor {
	const wa = "status.worker_assignment."
	a := Actor{
		Atespace: protopath.String(m, "metadata.atespace", "atespace"),
		Name:     protopath.String(m, "metadata.name", "actor_id"),
		UID:      protopath.String(m, "metadata.uid"),
		Version:  protopath.Int(m, "metadata.version", "version"),
		// "status" is the ActorStatus message from era C, an enum before.
		State:  atestate.ParseActorState(protopath.EnumName(m, "status.state", "status")),
		Worker: protopath.String(m, wa+"worker.name", wa+"worker_pod_uid", "ateom_pod_uid"),
		Pool:   protopath.String(m, wa+"worker_pool", "worker_pool_name"),
		Pod:    protopath.String(m, wa+"worker_pod", "ateom_pod_name"),
		Node:   protopath.String(m, wa+"node_name"),

		AssignedNode: protopath.String(m, "status.assigned_node"),
		SnapshotNodes: protopath.Strings(m,
			"status.local_snapshot.node_vms_with_local_snapshots",
			"status.local_snapshot_info.node_vms_with_local_snapshots",
			"local_snapshot_info.node_vms_with_local_snapshots",
			"latest_snapshot_info.local.node_vms_with_local_snapshots"),
		ExternalSnapshotURI: protopath.String(m, "status.external_snapshot.snapshot_uri", "snapshot_uri"),
		CrashMessage:        protopath.String(m, "status.crash.message"),
	}
	if a.Worker == "" && a.Node == "" {
		a.Node = a.AssignedNode
	}
	return a
}

// unwrap returns the named object of a response: the response itself when
// the RPC returns it bare (newer), else its field (older wrapped responses).
func unwrap(resp protoreflect.Message, typeName protoreflect.Name, field string) protoreflect.Message {
	if resp.Descriptor().Name() == typeName {
		return resp
	}
	if m := protopath.Message(resp, field); m != nil {
		return m
	}
	return nil
}
