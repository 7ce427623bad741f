// Package kubewatch is the part of the sim's invariant monitor that decides
// from Kubernetes objects alone: it watches nodes, rollbook's Leases, worker
// and atelet pods, ReplicaSets and WorkerPools, and reports to a
// monitor.Monitor every safety rule a run breaks. It reads the sim's own
// model (sim/substrate's labels and objects), never rollbook's predicates.
//
// # The contract a run declares on the cluster
//
// A run is "in progress" while it holds a coordination.k8s.io Lease named
// rollbook-tt or rollbook-ate, in any namespace (rollbook's defaults are
// kube-system and ate-system). A Lease is held while spec.holderIdentity is
// set and renewTime (else acquireTime) + leaseDurationSeconds is in the
// future; a released (empty holder) or expired Lease is not held.
//
//   - rollbook.dev/max-out-of-service on the Lease (a positive integer,
//     default 1 when absent or not a positive integer) is how many nodes
//     that run may have out of service at once. With several Leases held the
//     allowances add up.
//   - rollbook.dev/cordoned-by on a node marks a cordon a run set; a node
//     unschedulable without it is a foreign cordon and is nobody's business
//     here (it never counts as out of service, even when NotReady).
//   - rollbook.dev/left-cordoned on a node (a non-empty reason) is how a run
//     that ends with a node still cordoned says so on purpose: a plugin
//     writes it when it stops with a node cordoned and removes it when it
//     uncordons the node.
//   - rollbook.dev/recovering-node on a held Lease, "RUN/NODE" with RUN the
//     holder's rollbook.dev/holder-run, names one node whose drained worker
//     pods the run deletes so that their pools replace them in place
//     (kubectl ate recover-node); see old-pool-pod-deleted-before-flip.
//
// # Rules
//
//   - too-many-nodes-out-of-service: while a Lease is held, more nodes are out
//     of service (unschedulable with rollbook.dev/cordoned-by, or NotReady
//     without a foreign cordon) than the held Leases allow.
//   - cordon-left-behind: a node cordoned by rollbook (cordoned-by present,
//     spec.unschedulable) without rollbook.dev/left-cordoned while no Lease
//     is held, for longer than a grace period (CordonGrace).
//   - worker-next-to-other-atelet: a Running, not terminating worker pod
//     pinned to version V (ate.dev/substrate-version in its nodeSelector)
//     next to a Running atelet pod of another version on the same node for
//     longer than SkewGrace. A roll's flip (label, then the old pods'
//     deletion) passes through this state for a few seconds; staying there
//     is the skew. Unpinned worker pods are ignored.
//   - old-pool-pod-deleted-before-flip: a worker pod pinned to V is deleted
//     (or evicted) while its Ready node, not being deleted, still carries
//     V. Deletions by its ReplicaSet's controller (the ReplicaSet is gone,
//     being deleted, or scaled below its live pods) are not counted: a pool's
//     deletion or scale-down is the next rule's business. Neither are
//     deletions on a node a held Lease declares rollbook.dev/recovering-node:
//     that node keeps its version, so the replacements are meant to land there.
//   - serving-pool-edited: a serving WorkerPool has its spec changed
//     (generation bump, scale-down named) or is deleted. A pool is serving
//     while at least one of its worker pods is Running, not terminating, on a
//     node whose version label equals the pod's pin (any Running pod for an
//     unpinned pool): the objects cannot see actors, so a pool that could
//     host one counts. A pool is free to go once no node carries its
//     version (retire after the roll, clones after a rollback).
package kubewatch
