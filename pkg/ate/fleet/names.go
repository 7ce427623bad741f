package fleet

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Names and labels of a real install (docs/ate.md lists their sources).
const (
	Namespace    = "ate-system"
	VersionLabel = "ate.dev/substrate-version"
	PoolLabel    = "ate.dev/worker-pool"
	// GKENodePoolLabel is the label GKE puts on every node of a node pool.
	GKENodePoolLabel = "cloud.google.com/gke-nodepool"
	AppLabel         = "app"
	AteletApp        = "atelet"
	// AnnClonedFrom marks a WorkerPool rollbook cloned, naming its source
	// ("<namespace>/<name>"), so pairing never rests on naming conventions.
	AnnClonedFrom = "rollbook.dev/cloned-from"
	// AnnSourceGeneration on a clone is its source's metadata.generation
	// when clone-pools copied it: a source edited or scaled since (the
	// runbook warns against it mid-roll) has another.
	AnnSourceGeneration = "rollbook.dev/cloned-from-generation"
	// LockName is the Lease every ate runbook takes.
	LockName = "rollbook-ate"
)

// rollbook's marks on a node the node runbook moves: the read model shows
// them (NodeInfo), only the node runbook writes them and decides on them.
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
	// AnnEveryNodeReached on the NEW atelet DaemonSet records when every
	// node was first seen at its version (RFC3339): from then on step 6
	// may have upgraded the control plane, whatever nodes join later at
	// OLD (an autoscaler, an auto-repair), so a rollback moves no node
	// until it is told the OLD API server is back.
	AnnEveryNodeReached = "rollbook.dev/ate-every-node-reached"
	// AnnControlPlaneReverted on the NEW atelet DaemonSet records when a
	// rollback was told (--control-plane-reverted) that the OLD API server
	// is back, or that step 6 never ran (RFC3339).
	AnnControlPlaneReverted = "rollbook.dev/ate-control-plane-reverted"
	// AnnAPIServerAtReached on the NEW atelet DaemonSet records, with
	// AnnEveryNodeReached, the images the API server's Deployment ran then:
	// the OLD release's, as step 6 comes after every node.
	AnnAPIServerAtReached = "rollbook.dev/ate-api-server-at-reached"
	// AnnStep6Seen on the NEW atelet DaemonSet records when a run first saw
	// the API server run other images than AnnAPIServerAtReached, and
	// which ("RFC3339 images"): step 6 ran.
	AnnStep6Seen = "rollbook.dev/ate-step6-seen"
	// APIServerDeployment is the control API server's Deployment in
	// Namespace, as ate-setup's `deploy apiserver` (runbook step 6) applies
	// and waits for it.
	APIServerDeployment = "ate-api-server"
	// ControllerDeployment is ate-controller's Deployment in Namespace, as
	// ate-setup's `deploy ate-controller` (runbook step 2) applies it.
	ControllerDeployment = "ate-controller"
)

// WorkerPoolGVR is the WorkerPool custom resource.
var WorkerPoolGVR = schema.GroupVersionResource{Group: "ate.dev", Version: "v1alpha1", Resource: "workerpools"}

// PoolRef is the object reference of a WorkerPool (for Events).
func PoolRef(ns, name string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "WorkerPool", APIVersion: "ate.dev/v1alpha1", Namespace: ns, Name: name}
}
