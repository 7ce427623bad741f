// Package kube holds the cluster primitives both plugins share: owned
// cordon/uncordon, drain with a report of what blocks it, preconditioned
// label and annotation patches, helper pods and watch-based waits. Every
// mutation is reported to a Recorder, which emits a Kubernetes Event on the
// object and prints it.
package kube

// Annotation keys rollbook keeps on objects it touches.
const (
	AnnotationPrefix = "rollbook.dev/"
	// CordonedBy names the runbook that cordoned the node; only that runbook
	// uncordons it.
	AnnCordonedBy = AnnotationPrefix + "cordoned-by"
	AnnCordonedAt = AnnotationPrefix + "cordoned-at"
	// AnnCordonRun is the run that cordoned the node, for the record.
	AnnCordonRun = AnnotationPrefix + "cordon-run"
	// AnnLeftCordoned says why a run that ended left the node cordoned: the
	// cluster, not only the run's terminal, says so. Cleared on uncordon.
	AnnLeftCordoned = AnnotationPrefix + "left-cordoned"
)
