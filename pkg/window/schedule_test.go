package window

import (
	"strings"
	"testing"
	"time"
)

func TestParseStopAt(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 500, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2h30m", time.Date(2026, 3, 2, 12, 30, 0, 0, time.UTC)},
		{"2026-03-02T12:00:00+01:00", time.Date(2026, 3, 2, 11, 0, 0, 0, time.UTC)},
		{"2026-03-02T11:00:00Z", time.Date(2026, 3, 2, 11, 0, 0, 0, time.UTC)},
	} {
		got, err := ParseStopAt(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParseStopAt(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "0s", "-1h", "tomorrow", "2026-03-02 12:00", "2026-03-02T12:00", "12:00", "1d"} {
		if got, err := ParseStopAt(bad, now); err == nil {
			t.Errorf("ParseStopAt(%q) = %s; want an error", bad, got)
		}
	}
}

func TestScheduleAt(t *testing.T) {
	w := must(t, "Mon-Fri 01:00-05:00 UTC")
	mon := func(hhmm string) time.Time { return at(t, "UTC", "2026-03-02 "+hhmm) }
	for _, tc := range []struct {
		name   string
		s      Schedule
		now    time.Time
		open   bool
		reason string
		next   time.Time
	}{
		{"no limits", Schedule{}, mon("12:00"), true, "", time.Time{}},
		{"in the window", Schedule{Window: w}, mon("02:00"), true, "", time.Time{}},
		{"after it", Schedule{Window: w}, mon("05:00"), false, "outside the maintenance window", at(t, "UTC", "2026-03-03 01:00")},
		{"before stop-at", Schedule{Window: w, StopAt: mon("03:00")}, mon("02:59"), true, "", time.Time{}},
		{"at stop-at", Schedule{Window: w, StopAt: mon("03:00")}, mon("03:00"), false, "--stop-at", time.Time{}},
		{"stop-at only", Schedule{StopAt: mon("03:00")}, mon("04:00"), false, "has passed", time.Time{}},
		// The next opening is after --stop-at: there is none for this run.
		{"next after stop-at", Schedule{Window: w, StopAt: mon("23:00")}, mon("06:00"), false, "outside", time.Time{}},
	} {
		v := tc.s.At(tc.now)
		if v.Open != tc.open || !strings.Contains(v.Reason, tc.reason) || !v.Next.Equal(tc.next) {
			t.Errorf("%s: %+v; want open %v, reason ~%q, next %s", tc.name, v, tc.open, tc.reason, tc.next)
		}
	}
}

func TestUntilAndWhen(t *testing.T) {
	w := must(t, "Mon-Fri 01:00-05:00 Europe/Berlin")
	now := at(t, "UTC", "2026-03-02 01:00") // 02:00 CET
	got := Schedule{Window: w, StopAt: now.Add(90*time.Minute + time.Second)}.Until(now)
	for _, want := range []string{"closes Mon 2026-03-02 05:00 CET (in 3h0m)", "--stop-at Mon 2026-03-02 02:30 UTC (in 1h31m)"} {
		if !strings.Contains(got, want) {
			t.Errorf("Until = %q; want it to contain %q", got, want)
		}
	}
	if got := (Schedule{}).Until(now); got != "" {
		t.Errorf("Until without limits = %q", got)
	}
}
