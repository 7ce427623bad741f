package window

import (
	"strings"
	"testing"
	"time"
)

func must(t *testing.T, s string) *Window {
	t.Helper()
	w, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func at(t *testing.T, zone, wall string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", wall, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseRefusesBadWindows(t *testing.T) {
	for _, s := range []string{
		"", "01:00-05:00", "Mon-Fri 01:00-05:00", "01:00-05:00 Local", "01:00-05:00 local",
		"01:00-05:00 Mars/Olympus", "01:00-05:00 +0100", "01:00-05:00 ../../etc/passwd", "01:00-05:00 /etc/localtime",
		"Mon-Fri 1:00-05:00 UTC", "Mon-Fri 01:00-5:00 UTC", "Mon-Fri 24:00-05:00 UTC", "Mon-Fri 01:00-24:01 UTC",
		"Mon-Fri 01:60-05:00 UTC", "Mon-Fri 01:00-05:60 UTC", "Mon-Fri 25:00-05:00 UTC", "Mon-Fri 01:00 UTC",
		"Mon-Fri 01:00-05:00-06:00 UTC", "Mon-Fri +1:00-05:00 UTC", "Mon-Fri -1:00-05:00 UTC", "Mon-Fri 01:00-01:00 UTC",
		"Mon-Fri 00:00-24:00 UTC", "Monday 01:00-05:00 UTC", "Mon-Mon 01:00-05:00 UTC", "Mon,Mon 01:00-05:00 UTC",
		"Mon-Fri,Wed 01:00-05:00 UTC", "Mon, 01:00-05:00 UTC", ",Mon 01:00-05:00 UTC", "Mon- 01:00-05:00 UTC",
		"Mon-Fri 01:00-05:00 UTC extra", "Mon-Fri 01h00-05h00 UTC", "Mon-Fri 01:00–05:00 UTC",
	} {
		if w, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted %+v; want an error", s, w)
		} else if !strings.Contains(err.Error(), "window") {
			t.Errorf("Parse(%q): error %q does not say it is the window", s, err)
		}
	}
}

// Every one-character change of a valid window either is refused or
// parses to a window that still says what it opens on: the parser never
// accepts a mangled window silently as something else it did not print.
func TestParseMutationsAreRefusedOrFaithful(t *testing.T) {
	const good = "Mon-Fri 01:00-05:00 Europe/Berlin"
	alphabet := "0123456789:-, MonTueWedThuFriSatSunUTC/+"
	for i := range len(good) {
		for _, c := range alphabet + "\x00" {
			b := []byte(good)
			if c == 0 {
				b = append(b[:i:i], b[i+1:]...)
			} else {
				b[i] = byte(c)
			}
			s := string(b)
			w, err := Parse(s)
			if err != nil {
				continue
			}
			if w.String() != strings.Join(strings.Fields(s), " ") {
				t.Errorf("Parse(%q) = %q", s, w)
			}
			if w.NextOpen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
				t.Errorf("Parse(%q) accepted a window that never opens", s)
			}
		}
	}
}

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		window, zone, wall string
		open               bool
	}{
		// 2026-03-02 is a Monday.
		{"Mon-Fri 01:00-05:00 UTC", "UTC", "2026-03-02 01:00", true},
		{"Mon-Fri 01:00-05:00 UTC", "UTC", "2026-03-02 04:59", true},
		{"Mon-Fri 01:00-05:00 UTC", "UTC", "2026-03-02 05:00", false},
		{"Mon-Fri 01:00-05:00 UTC", "UTC", "2026-03-02 00:59", false},
		{"Mon-Fri 01:00-05:00 UTC", "UTC", "2026-03-07 02:00", false}, // Saturday
		{"mon-fri 01:00-05:00 UTC", "UTC", "2026-03-06 02:00", true},  // Friday, any case
		// In the window's zone, not the caller's: 01:00 Berlin is 00:00 UTC in winter.
		{"Mon-Fri 01:00-05:00 Europe/Berlin", "UTC", "2026-03-02 00:00", true},
		{"Mon-Fri 01:00-05:00 Europe/Berlin", "UTC", "2026-03-02 04:00", false},
		{"Mon-Fri 01:00-05:00 Europe/Berlin", "UTC", "2026-03-01 23:59", false}, // Sunday in UTC, Monday 00:59 in Berlin
		{"Mon-Fri 01:00-05:00 Europe/Berlin", "America/New_York", "2026-03-01 19:30", true},
		// Across midnight: opens Friday evening, closes Saturday morning.
		{"Fri 22:00-02:00 UTC", "UTC", "2026-03-06 23:30", true},
		{"Fri 22:00-02:00 UTC", "UTC", "2026-03-07 01:59", true},
		{"Fri 22:00-02:00 UTC", "UTC", "2026-03-07 02:00", false},
		{"Fri 22:00-02:00 UTC", "UTC", "2026-03-06 01:00", false}, // Friday morning: Thursday did not open
		{"Fri 22:00-02:00 UTC", "UTC", "2026-03-07 22:30", false}, // Saturday evening
		// Day ranges wrap past Sunday; lists combine.
		{"Fri-Mon 10:00-11:00 UTC", "UTC", "2026-03-08 10:30", true},  // Sunday
		{"Fri-Mon 10:00-11:00 UTC", "UTC", "2026-03-03 10:30", false}, // Tuesday
		{"Sat,Sun,Wed 10:00-11:00 UTC", "UTC", "2026-03-04 10:30", true},
		{"Sat,Sun,Wed 10:00-11:00 UTC", "UTC", "2026-03-05 10:30", false},
		// Every day; an end of 24:00.
		{"20:00-24:00 UTC", "UTC", "2026-03-05 23:59", true},
		{"20:00-24:00 UTC", "UTC", "2026-03-06 00:00", false},
		// DST: Berlin springs forward 2026-03-29 02:00 CET -> 03:00 CEST.
		{"Sun 02:00-04:00 Europe/Berlin", "UTC", "2026-03-29 00:59", false}, // 01:59 CET
		{"Sun 02:00-04:00 Europe/Berlin", "UTC", "2026-03-29 01:00", true},  // 03:00 CEST: the skipped hour shortens it
		{"Sun 02:00-04:00 Europe/Berlin", "UTC", "2026-03-29 02:00", false}, // 04:00 CEST
		{"Sun 02:00-03:00 Europe/Berlin", "UTC", "2026-03-29 01:00", false}, // wholly in the skipped hour: not that night
		// and falls back 2026-10-25 03:00 CEST -> 02:00 CET: the repeated hour is open twice.
		{"Sun 02:00-03:00 Europe/Berlin", "UTC", "2026-10-25 00:30", true}, // 02:30 CEST
		{"Sun 02:00-03:00 Europe/Berlin", "UTC", "2026-10-25 01:30", true}, // 02:30 CET
		{"Sun 02:00-03:00 Europe/Berlin", "UTC", "2026-10-25 02:00", false},
	} {
		if got := must(t, tc.window).Open(at(t, tc.zone, tc.wall)); got != tc.open {
			t.Errorf("%q at %s %s: open %v, want %v", tc.window, tc.wall, tc.zone, got, tc.open)
		}
	}
}

func TestNextOpenAndCloseAt(t *testing.T) {
	for _, tc := range []struct {
		window, wall, next, close string // wall times UTC
	}{
		{"Mon-Fri 01:00-05:00 UTC", "2026-03-02 03:00", "2026-03-02 03:00", "2026-03-02 05:00"},
		{"Mon-Fri 01:00-05:00 UTC", "2026-03-02 05:00", "2026-03-03 01:00", "2026-03-02 05:00"},
		{"Mon-Fri 01:00-05:00 UTC", "2026-03-06 06:00", "2026-03-09 01:00", "2026-03-06 06:00"}, // Friday -> Monday
		{"Fri 22:00-02:00 UTC", "2026-03-06 23:00", "2026-03-06 23:00", "2026-03-07 02:00"},
		{"Fri 22:00-02:00 UTC", "2026-03-07 03:00", "2026-03-13 22:00", "2026-03-07 03:00"},
		// Berlin's window at 01:00 local opens at 00:00 UTC in winter, 23:00 UTC the day before in summer.
		{"Mon-Fri 01:00-05:00 Europe/Berlin", "2026-03-27 12:00", "2026-03-29 23:00", "2026-03-27 12:00"},
		// Spring forward: 02:00-04:00 Sunday opens at 03:00 CEST (01:00 UTC).
		{"Sun 02:00-04:00 Europe/Berlin", "2026-03-28 12:00", "2026-03-29 01:00", "2026-03-28 12:00"},
		// A window wholly in the skipped hour opens the next week instead.
		{"Sun 02:00-03:00 Europe/Berlin", "2026-03-28 12:00", "2026-04-05 00:00", "2026-03-28 12:00"},
		// Fall back: open through both passes of 02:00-03:00, closing at 03:00 CET.
		{"Sun 02:00-03:00 Europe/Berlin", "2026-10-25 00:10", "2026-10-25 00:10", "2026-10-25 02:00"},
		// A time between minutes: the next opening is on a minute.
		{"Mon-Fri 01:00-05:00 UTC", "2026-03-02 00:59", "2026-03-02 01:00", "2026-03-02 00:59"},
	} {
		w := must(t, tc.window)
		now := at(t, "UTC", tc.wall)
		if got := w.NextOpen(now); !got.Equal(at(t, "UTC", tc.next)) {
			t.Errorf("%q NextOpen(%s) = %s, want %s", tc.window, tc.wall, got.UTC(), tc.next)
		}
		if got := w.CloseAt(now); !got.Equal(at(t, "UTC", tc.close)) {
			t.Errorf("%q CloseAt(%s) = %s, want %s", tc.window, tc.wall, got.UTC(), tc.close)
		}
	}
}

// NextOpen and CloseAt agree with Open minute by minute over a year of a
// zone with daylight saving: nothing opens before NextOpen, nothing
// closes before CloseAt.
func TestSearchesAgreeWithOpen(t *testing.T) {
	for _, s := range []string{"Mon-Fri 01:00-05:00 Europe/Berlin", "Sat,Sun 23:30-00:30 America/New_York", "02:15-02:45 Europe/Berlin"} {
		w := must(t, s)
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		step := 401 * time.Minute
		if testing.Short() {
			step = 997 * time.Minute
		}
		for m := start; m.Before(start.AddDate(1, 0, 0)); m = m.Add(step) {
			next, end := w.NextOpen(m), w.CloseAt(m)
			if next.IsZero() || !w.Open(next) {
				t.Fatalf("%q NextOpen(%s) = %s is not open", s, m, next)
			}
			for x := m.Truncate(time.Minute).Add(time.Minute); x.Before(next); x = x.Add(time.Minute) {
				if w.Open(x) {
					t.Fatalf("%q open at %s, before NextOpen(%s) = %s", s, x, m, next)
				}
			}
			if w.Open(m) && (end.IsZero() || w.Open(end) || end.Sub(m) > 25*time.Hour) {
				t.Fatalf("%q CloseAt(%s) = %s", s, m, end)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"Mon-Fri 01:00-05:00 Europe/Berlin", "Fri 22:00-02:00 UTC", "Sat,Sun 00:00-24:00 UTC", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := Parse(s)
		if err != nil {
			return
		}
		if w.NextOpen(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			t.Fatalf("Parse(%q) accepted a window that never opens", s)
		}
	})
}
