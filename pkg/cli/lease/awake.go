package lease

import "time"

// Time as the lock must judge it. Go's timers and time.Since run on the
// monotonic clock, which stops while the machine sleeps: CLOCK_MONOTONIC
// on Linux, mach_absolute_time on darwin. A laptop that slept through its
// Lease's expiry would, by that clock alone, wake believing seconds had
// passed, and act on facts read before it slept while another run holds
// the Lease. The boot clock runs on through a suspend: CLOCK_BOOTTIME on
// Linux, CLOCK_MONOTONIC on darwin (which, unlike Go's, counts sleep);
// elsewhere the wall clock stands in for it. A process stopped with
// SIGSTOP sees both clocks run on, and its renewals and checks judge the
// gap the same way.

// BootClock reads a clock that keeps running while the machine is
// suspended, as a duration from any fixed origin.
type BootClock func() time.Duration

// stamp is one moment read on both clocks.
type stamp struct {
	mono time.Time // with Go's monotonic reading
	boot time.Duration
}

// clocks reads stamps; boot is the system's boot clock unless a test gives
// its own.
type clocks struct{ boot BootClock }

func (c clocks) now() stamp { return stamp{mono: time.Now(), boot: c.boot()} }

// since is the time elapsed since s by whichever clock saw more of it: a
// suspend shows on the boot clock only; the boot clock never lags the
// monotonic one otherwise (a wall clock set back does, and is outvoted).
func (c clocks) since(s stamp) time.Duration {
	return max(time.Since(s.mono), c.boot()-s.boot)
}

// slept is how much longer the boot clock ran than the monotonic one
// between a and b: time this machine spent suspended.
func slept(a, b stamp) time.Duration {
	return (b.boot - a.boot) - b.mono.Sub(a.mono)
}

// wallClock is the boot clock where the system has none that runs through
// a suspend: the wall clock, as nanoseconds since the epoch (without Go's
// monotonic reading, which would stop with the machine).
func wallClock() time.Duration { return time.Duration(time.Now().Round(0).UnixNano()) }
