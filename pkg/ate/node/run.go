package node

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Run is the node runbook as one run of several nodes uses it: one runbook
// and one observer serve every node, the observer set to each node as it
// starts (Begin).
type Run struct {
	obs *nodeObserver
	rb  *runbook.Runbook[nodeFacts]
}

// NewRun prepares a run moving nodes with cfg (the run's flags; Begin
// gives each node its sides and pace).
func NewRun(cs kubernetes.Interface, api API, rec kube.Recorder, cfg Config) *Run {
	obs := newNodeObserver(cs, api, &cfg)
	return &Run{obs: obs, rb: nodeRunbook(obs, rec)}
}

// Runbook is the node runbook every node of the run runs.
func (r *Run) Runbook() *runbook.Runbook[nodeFacts] { return r.rb }

// Begin sets the run to its next node, moved the way cfg says; listed is
// the node as the run just listed it in full (nil when it was not): the
// first look starts from it.
func (r *Run) Begin(cfg *Config, listed *corev1.Node) { r.obs.begin(cfg, listed) }

// Target is node as the engine's target, written through the run's client.
func (r *Run) Target(node string) runbook.Target {
	return runbook.NodeTarget{Client: r.obs.cs, Node: node}
}

// WaitForCapacity waits (at most limit) until the actors on node, the one
// begun, have enough free workers of their pool lineage elsewhere.
func (r *Run) WaitForCapacity(ctx context.Context, node string, limit time.Duration, say func(string, ...any)) error {
	return waitForCapacity(ctx, r.obs, node, limit, say)
}

// Close stops what the run watches.
func (r *Run) Close() { r.obs.close() }
