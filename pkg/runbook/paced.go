package runbook

import "context"

type pacedKey struct{}

// Paced marks ctx's requests as made because time passed, not because a
// target advanced: a Lease renewal, a step clock stored after the clock
// delay, a journal batch written on its timer. Against a cluster that acts
// at once none of them happens, so request budgets per target (≤ 40 per
// node) count them apart, as a cost per second of the run.
func Paced(ctx context.Context) context.Context { return context.WithValue(ctx, pacedKey{}, true) }

// IsPaced reports whether ctx was marked by Paced.
func IsPaced(ctx context.Context) bool { v, _ := ctx.Value(pacedKey{}).(bool); return v }
