//go:build !linux && !darwin

package lease

import "time"

// SystemBootClock is the wall clock here: no clock that runs through a
// suspend is read on this system. A wall clock set back is outvoted by the
// monotonic one; set forward, it costs one early check of the Lease.
func SystemBootClock() time.Duration { return wallClock() }
