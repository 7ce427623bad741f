package lease

import (
	"time"

	"golang.org/x/sys/unix"
)

// SystemBootClock is darwin's CLOCK_MONOTONIC, which keeps counting while
// the machine sleeps (Go's own monotonic clock, mach_absolute_time, does
// not).
func SystemBootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return wallClock()
	}
	return time.Duration(ts.Nano())
}
