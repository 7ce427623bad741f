// Package ate is the Agent Substrate rolling upgrade as runbooks: it reads
// where the roll stands from the cluster (atelet DaemonSets, node version
// labels, WorkerPools and their pods) and from the substrate control API
// (workers, actors), and moves one node at a time from OLD to NEW without
// losing an actor.
package ate

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Names and labels of a real install (docs/ate.md lists their sources).
const (
	Namespace    = "ate-system"
	VersionLabel = "ate.dev/substrate-version"
	PoolLabel    = "ate.dev/worker-pool"
	AppLabel     = "app"
	AteletApp    = "atelet"
	// AnnClonedFrom marks a WorkerPool rollbook cloned, naming its source
	// ("<namespace>/<name>"), so pairing never rests on naming conventions.
	AnnClonedFrom = "rollbook.dev/cloned-from"
	// LockName is the Lease every ate runbook takes.
	LockName = "rollbook-ate"
)

// rollbook's own bookkeeping on a node it moves (the node runbook).
const (
	// AnnMovingTo marks a node whose move has begun with the version it
	// moves to. The node runbook's first step writes it, before the first
	// DrainWorker, so the node in progress is known from the node itself,
	// not only from its DRAINING workers in a (soft) worker list that may
	// leave them out.
	AnnMovingTo = "rollbook.dev/ate-moving-to"
	// AnnVerifyPending marks a flipped node that has not yet shown it
	// serves the version it moved to (value: that version). The flip's
	// patch writes it; the verify step removes it once the node serves.
	// Until then the node is half-moved: the next call finishes it before
	// taking another node, so a canary that never brought up a new worker
	// cannot let the roll go on.
	AnnVerifyPending = "rollbook.dev/ate-verify-pending"
	// AnnResidents lists ("atespace/name,…") every actor an observation of
	// the node's move saw living there. The flip reads each one with
	// GetActor: an actor that (soft) lists leave out in every later look is
	// still read.
	AnnResidents = "rollbook.dev/ate-residents"
	// CordonOwner owns the short cordon around the flip (kube.CordonNode).
	CordonOwner = "ate-node"
)

// WorkerPoolGVR is the WorkerPool custom resource.
var WorkerPoolGVR = schema.GroupVersionResource{Group: "ate.dev", Version: "v1alpha1", Resource: "workerpools"}

func poolRef(ns, name string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "WorkerPool", APIVersion: "ate.dev/v1alpha1", Namespace: ns, Name: name}
}
