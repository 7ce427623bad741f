package ateapi

import "google.golang.org/protobuf/reflect/protoreflect"

// decodeWorker reads a Worker of any era (brief §2.3): flat (B), resource
// style with status.assignment (C), or with capacity/allocated (D).
func decodeWorker(m protoreflect.Message) Worker {
	w := Worker{
		// Before era C the worker had no metadata; its identity is the pod UID.
		Name:            getStr(m, "metadata.name", "worker_pod_uid"),
		Namespace:       getStr(m, "worker_namespace"),
		Pool:            getStr(m, "worker_pool"),
		Pod:             getStr(m, "worker_pod"),
		PodUID:          getStr(m, "worker_pod_uid"),
		Node:            getStr(m, "node_name"),
		IPs:             getStrs(m, "ips", "ip"),
		SandboxClass:    getStr(m, "sandbox_class"),
		Labels:          getStrMap(m, "labels"),
		State:           ParseWorkerState(getEnum(m, "status.state", "state")),
		Version:         getInt(m, "metadata.version", "version"),
		CapacityActors:  int(getInt(m, "status.capacity.actors")),
		AllocatedActors: int(getInt(m, "status.allocated.actors")),
	}
	for _, p := range []string{"status.assignment.actor", "assignment.actor"} {
		if ref := getMsg(m, p); ref != nil {
			r := ActorRef{Atespace: getStr(ref, "atespace"), Name: getStr(ref, "name", "actor_id")}
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
		Atespace: getStr(m, "metadata.atespace", "atespace"),
		Name:     getStr(m, "metadata.name", "actor_id"),
		UID:      getStr(m, "metadata.uid"),
		Version:  getInt(m, "metadata.version", "version"),
		// "status" is the ActorStatus message from era C, an enum before.
		State:  ParseActorState(getEnum(m, "status.state", "status")),
		Worker: getStr(m, wa+"worker.name", wa+"worker_pod_uid", "ateom_pod_uid"),
		Pool:   getStr(m, wa+"worker_pool", "worker_pool_name"),
		Pod:    getStr(m, wa+"worker_pod", "ateom_pod_name"),
		Node:   getStr(m, wa+"node_name"),

		AssignedNode: getStr(m, "status.assigned_node"),
		SnapshotNodes: getStrs(m,
			"status.local_snapshot.node_vms_with_local_snapshots",
			"status.local_snapshot_info.node_vms_with_local_snapshots",
			"local_snapshot_info.node_vms_with_local_snapshots",
			"latest_snapshot_info.local.node_vms_with_local_snapshots"),
		ExternalSnapshotURI: getStr(m, "status.external_snapshot.snapshot_uri", "snapshot_uri"),
		CrashMessage:        getStr(m, "status.crash.message"),
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
	if m := getMsg(resp, field); m != nil {
		return m
	}
	return nil
}
