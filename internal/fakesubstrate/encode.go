package fakesubstrate

import (
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Encoders write a stored worker or actor into whatever shape the era's
// descriptor has, trying each era's path for every fact (brief §2.3).

func (s *Server) encodeWorker(m protoreflect.Message, w *Worker) {
	setFirst(m, w.Name, "metadata.name")
	setFirst(m, "wuid-"+w.Name, "metadata.uid")
	setFirst(m, w.Version, "metadata.version", "version")
	if !w.Created.IsZero() {
		setFirst(m, w.Created.Unix(), "metadata.create_time.seconds")
	}
	setFirst(m, w.Namespace, "worker_namespace")
	setFirst(m, w.Pool, "worker_pool")
	setFirst(m, w.Pod, "worker_pod")
	setFirst(m, w.Name, "worker_pod_uid")
	setFirst(m, w.Node, "node_name")
	setFirst(m, w.IPs, "ips", "ip")
	setFirst(m, w.SandboxClass, "sandbox_class")
	setFirst(m, w.Labels, "labels")
	setFirst(m, enumSuffix(w.State), "status.state", "state")

	bound := s.actorsOn(w.Name)
	if hasPath(m.Descriptor(), "status.capacity.actors") { // era D: counts, no refs
		setFirst(m, w.capacity(), "status.capacity.actors")
		setFirst(m, len(bound), "status.allocated.actors")
		return
	}
	if len(bound) == 0 {
		return
	}
	a := bound[0] // before era D a worker hosts at most one actor
	asg := firstPresent(m.Descriptor(), "status.assignment", "assignment")
	if asg == "" {
		return
	}
	setFirst(m, a.Atespace, asg+".actor.atespace")
	setFirst(m, a.Name, asg+".actor.name")
	setFirst(m, a.UID, asg+".actor_uid")
	setFirst(m, "templates", asg+".actor_template.namespace")
	setFirst(m, "tmpl-"+a.Name, asg+".actor_template.name")
}

func (s *Server) encodeActor(m protoreflect.Message, a *Actor) {
	setFirst(m, a.Atespace, "metadata.atespace")
	setFirst(m, a.Name, "metadata.name")
	setFirst(m, a.UID, "metadata.uid")
	setFirst(m, a.Version, "metadata.version")
	// "status" is a message from era C on and an enum in B2; setFirst skips
	// paths whose kinds do not fit.
	setFirst(m, enumSuffix(a.State), "status.state", "status")
	setFirst(m, a.ExternalSnapshotURI, "status.external_snapshot.snapshot_uri", "snapshot_uri")
	setFirst(m, a.SnapshotNodes,
		"status.local_snapshot.node_vms_with_local_snapshots",
		"status.local_snapshot_info.node_vms_with_local_snapshots",
		"local_snapshot_info.node_vms_with_local_snapshots")
	setFirst(m, a.CrashMessage, "status.crash.message")
	if a.State != ActorSuspended {
		setFirst(m, a.AssignedNode, "status.assigned_node")
	}
	w, ok := s.workers[a.Worker]
	if !ok {
		return
	}
	if hasPath(m.Descriptor(), "status.worker_assignment") {
		const wa = "status.worker_assignment."
		setFirst(m, w.Name, wa+"worker.name")
		setFirst(m, w.Namespace, wa+"worker_namespace")
		setFirst(m, w.Pool, wa+"worker_pool")
		setFirst(m, w.Pod, wa+"worker_pod")
		setFirst(m, w.Name, wa+"worker_pod_uid")
		setFirst(m, w.IPs, wa+"worker_pod_ips", wa+"worker_pod_ip")
		setFirst(m, w.Node, wa+"node_name")
		return
	}
	// Era B2: the actor names its worker pod ("ateom pod") directly.
	setFirst(m, w.Namespace, "ateom_pod_namespace")
	setFirst(m, w.Pod, "ateom_pod_name")
	setFirst(m, w.IPs, "ateom_pod_ip")
	setFirst(m, w.Name, "ateom_pod_uid")
	setFirst(m, w.Pool, "worker_pool_name")
}
