package simtest

import (
	"fmt"
	"time"
)

// DailyWindow is a daily --window in UTC from an hour before end to end.
func DailyWindow(end time.Time) string {
	return fmt.Sprintf("%s-%s UTC", end.Add(-time.Hour).UTC().Format("15:04"), end.UTC().Format("15:04"))
}

// SleepUntilWindowCloses sleeps until lead before the next minute boundary
// at least 10 s away (a window's end is kept to the minute) and returns
// that boundary: a roll started then begins inside a window ending there.
func SleepUntilWindowCloses(lead time.Duration) time.Time {
	end := time.Now().Truncate(time.Minute).Add(time.Minute)
	if time.Until(end) < 10*time.Second {
		end = end.Add(time.Minute)
	}
	time.Sleep(time.Until(end) - lead)
	return end
}
