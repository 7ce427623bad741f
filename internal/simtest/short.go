package simtest

import (
	"errors"
	"flag"
	"testing"
)

// `go test -short` (make unit) starts no sim: Main runs the package's tests
// without one, Get skips each test that asks for it, and Start and SimBinary
// refuse, so a test that would start a sim some other way fails loudly
// instead of slowing the fast path down.

// ShortReason is what a sim-backed test says when -short skips it.
const ShortReason = "needs the simulated cluster: skipped under -short (make test runs it)"

var errShort = errors.New("simtest: no sim starts under -short (go test -short, make unit); " +
	"skip the test first with simtest.SkipShort(t)")

// short reports whether this test binary runs with -short. It is false
// before the flags are parsed and outside a test binary.
func short() bool {
	return flag.Lookup("test.short") != nil && flag.Parsed() && testing.Short()
}

// SkipShort skips a test that starts a sim of its own (Start) under -short.
func SkipShort(t testing.TB) {
	t.Helper()
	if short() {
		t.Skip(ShortReason)
	}
}
