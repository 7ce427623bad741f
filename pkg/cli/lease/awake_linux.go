package lease

import (
	"time"

	"golang.org/x/sys/unix"
)

// SystemBootClock is CLOCK_BOOTTIME: CLOCK_MONOTONIC plus the time the
// machine spent suspended.
func SystemBootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return wallClock()
	}
	return time.Duration(ts.Nano())
}
