package modelcheck

import (
	"os"
	"testing"
)

// Tier says when a model configuration is explored: Quick ones in every
// run, -short included (the fast path); Full ones in every run without
// -short; Long ones only with ROLLBOOK_MODEL_LONG=1. The Quick and Full
// configurations of a model together cover every invariant and every move.
type Tier int

// The tiers, shortest first.
const (
	Quick Tier = iota
	Full
	Long
)

// LongEnv turns the Long configurations on.
const LongEnv = "ROLLBOOK_MODEL_LONG"

// Skip skips the configuration when this run does not explore its tier.
func (t Tier) Skip(tb testing.TB) {
	tb.Helper()
	switch {
	case t == Long && os.Getenv(LongEnv) == "":
		tb.Skip("a long configuration: set " + LongEnv + "=1 to explore it")
	case t == Full && testing.Short():
		tb.Skip("-short explores the quick configurations only")
	}
}
