package fakesubstrate

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollbook/rollbook/pkg/atestate"
	"github.com/rollbook/rollbook/pkg/protopath"
)

// Encoders write a stored worker or actor into whatever shape the era's
// descriptor has, trying each era's path for every fact (the eras' protos
// are in protos/<era>; ateapi.Era names them).

func (s *Server) encodeWorker(m protoreflect.Message, w *Worker) {
	protopath.SetFirst(m, w.Name, "metadata.name")
	protopath.SetFirst(m, "wuid-"+w.Name, "metadata.uid")
	protopath.SetFirst(m, w.Version, "metadata.version", "version")
	if !w.Created.IsZero() {
		protopath.SetFirst(m, w.Created.Unix(), "metadata.create_time.seconds")
	}
	protopath.SetFirst(m, w.Namespace, "worker_namespace")
	protopath.SetFirst(m, w.Pool, "worker_pool")
	protopath.SetFirst(m, w.Pod, "worker_pod")
	protopath.SetFirst(m, w.Name, "worker_pod_uid")
	protopath.SetFirst(m, w.Node, "node_name")
	protopath.SetFirst(m, w.IPs, "ips", "ip")
	protopath.SetFirst(m, w.SandboxClass, "sandbox_class")
	protopath.SetFirst(m, w.Labels, "labels")
	protopath.SetFirst(m, protopath.EnumSuffix(w.State), "status.state", "state")

	bound := s.actorsOn(w.Name)
	if protopath.Has(m.Descriptor(), "status.capacity.actors") { // era D: counts, no refs
		if !w.CapacityPending { // unset until the worker's ateom reports it
			protopath.SetFirst(m, w.capacity(), "status.capacity.actors")
		}
		protopath.SetFirst(m, len(bound), "status.allocated.actors")
		return
	}
	if len(bound) == 0 {
		return
	}
	a := bound[0] // before era D a worker hosts at most one actor
	asg := protopath.First(m.Descriptor(), "status.assignment", "assignment")
	if asg == "" {
		return
	}
	protopath.SetFirst(m, a.Atespace, asg+".actor.atespace")
	protopath.SetFirst(m, a.Name, asg+".actor.name")
	protopath.SetFirst(m, a.UID, asg+".actor_uid")
	protopath.SetFirst(m, "templates", asg+".actor_template.namespace")
	protopath.SetFirst(m, "tmpl-"+a.Name, asg+".actor_template.name")
}

func (s *Server) encodeActor(m protoreflect.Message, a *Actor) {
	protopath.SetFirst(m, a.Atespace, "metadata.atespace")
	protopath.SetFirst(m, a.Name, "metadata.name")
	protopath.SetFirst(m, a.UID, "metadata.uid")
	protopath.SetFirst(m, a.Version, "metadata.version")
	// "status" is a message from era C on and an enum in B2; setFirst skips
	// paths whose kinds do not fit.
	protopath.SetFirst(m, protopath.EnumSuffix(a.State), "status.state", "status")
	protopath.SetFirst(m, a.ExternalSnapshotURI, "status.external_snapshot.snapshot_uri", "snapshot_uri")
	protopath.SetFirst(m, a.SnapshotNodes,
		"status.local_snapshot.node_vms_with_local_snapshots",
		"status.local_snapshot_info.node_vms_with_local_snapshots",
		"local_snapshot_info.node_vms_with_local_snapshots")
	protopath.SetFirst(m, a.CrashMessage, "status.crash.message")
	if a.State != atestate.ActorSuspended {
		protopath.SetFirst(m, a.AssignedNode, "status.assigned_node")
	}
	w, ok := s.workers[a.Worker]
	if !ok {
		return
	}
	if protopath.Has(m.Descriptor(), "status.worker_assignment") {
		const wa = "status.worker_assignment."
		protopath.SetFirst(m, w.Name, wa+"worker.name")
		protopath.SetFirst(m, w.Namespace, wa+"worker_namespace")
		protopath.SetFirst(m, w.Pool, wa+"worker_pool")
		protopath.SetFirst(m, w.Pod, wa+"worker_pod")
		protopath.SetFirst(m, w.Name, wa+"worker_pod_uid")
		protopath.SetFirst(m, w.IPs, wa+"worker_pod_ips", wa+"worker_pod_ip")
		protopath.SetFirst(m, w.Node, wa+"node_name")
		return
	}
	// Era B2: the actor names its worker pod ("ateom pod") directly.
	protopath.SetFirst(m, w.Namespace, "ateom_pod_namespace")
	protopath.SetFirst(m, w.Pod, "ateom_pod_name")
	protopath.SetFirst(m, w.IPs, "ateom_pod_ip")
	protopath.SetFirst(m, w.Name, "ateom_pod_uid")
	protopath.SetFirst(m, w.Pool, "worker_pool_name")
}
