// Package paced marks the API requests a run makes because time passed, not
// because a target advanced: a Lease renewal, a step clock stored once a
// step has run a while, a journal batch written on its timer, a watch a
// long wait opens. Against a cluster that acts at once none of them happens,
// so request budgets per target (≤ 40 per node) count them apart, as a cost
// per second of the run. A leaf: the engine, the lock, the journal and the
// Kubernetes helpers all mark requests.
package paced

import "context"

type key struct{}

// Mark returns ctx with its requests marked paced.
func Mark(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Is reports whether ctx was marked by Mark.
func Is(ctx context.Context) bool { v, _ := ctx.Value(key{}).(bool); return v }
