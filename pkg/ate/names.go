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

// WorkerPoolGVR is the WorkerPool custom resource.
var WorkerPoolGVR = schema.GroupVersionResource{Group: "ate.dev", Version: "v1alpha1", Resource: "workerpools"}

func poolRef(ns, name string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "WorkerPool", APIVersion: "ate.dev/v1alpha1", Namespace: ns, Name: name}
}
