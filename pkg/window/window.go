// Package window is a roll's schedule: the maintenance window in which
// nodes may start (--window) and the time after which none does
// (--stop-at). It is pure: every question takes the time it is asked at,
// so callers choose the clock and tests fix it.
//
// The window grammar is small and strict:
//
//	[DAYS ]HH:MM-HH:MM ZONE
//
//	DAYS  one day or range, or several joined by commas: Mon, Mon-Fri,
//	      Sat,Sun, Fri-Mon (a range may wrap past Sunday). English
//	      three-letter names, any case. Without DAYS: every day.
//	HH:MM 24-hour wall-clock time in ZONE, 00:00 to 23:59; the end may
//	      also be 24:00. An end at or before the start crosses midnight:
//	      the window opens on each listed day and closes the next day.
//	ZONE  an IANA time zone name (Europe/Berlin, America/New_York) or
//	      UTC. Required: a laptop's and an in-cluster Job's local zones
//	      differ, so "local" would mean two things.
//
// The window is open while the wall clock in ZONE reads a time inside
// it on a day it opens: on a daylight-saving change that follows the wall
// clock, so a window in a skipped hour is shorter that night and one in a
// repeated hour is open through both passes of it.
package window

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window is a parsed --window.
type Window struct {
	// days[d] says whether the window opens on weekday d.
	days [7]bool
	// start and end are minutes after midnight; end may be 1440 (24:00).
	// end <= start crosses midnight.
	start, end int
	loc        *time.Location
	text       string
}

var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// Parse reads a window in the package's grammar.
func Parse(s string) (*Window, error) {
	text := strings.Join(strings.Fields(s), " ")
	fields := strings.Fields(s)
	if len(fields) < 2 || len(fields) > 3 {
		return nil, fmt.Errorf("window %q: want [DAYS] HH:MM-HH:MM ZONE, as in \"Mon-Fri 01:00-05:00 Europe/Berlin\"", s)
	}
	w := &Window{text: text}
	if len(fields) == 3 {
		if err := w.parseDays(fields[0]); err != nil {
			return nil, fmt.Errorf("window %q: %w", s, err)
		}
		fields = fields[1:]
	} else {
		w.days = [7]bool{true, true, true, true, true, true, true}
	}
	from, to, ok := strings.Cut(fields[0], "-")
	if !ok {
		return nil, fmt.Errorf("window %q: times %q: want HH:MM-HH:MM", s, fields[0])
	}
	var err error
	if w.start, err = clock(from, false); err != nil {
		return nil, fmt.Errorf("window %q: %w", s, err)
	}
	if w.end, err = clock(to, true); err != nil {
		return nil, fmt.Errorf("window %q: %w", s, err)
	}
	if w.start == w.end%1440 {
		return nil, fmt.Errorf("window %q: it starts when it ends; for no limit leave --window out", s)
	}
	if w.loc, err = zone(fields[1]); err != nil {
		return nil, fmt.Errorf("window %q: %w", s, err)
	}
	return w, nil
}

// parseDays reads DAYS.
func (w *Window) parseDays(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, err := day(from)
		if err != nil {
			return err
		}
		b := a
		if isRange {
			if b, err = day(to); err != nil {
				return err
			}
			if a == b {
				return fmt.Errorf("days %q: a range from a day to itself; name the day once", part)
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			if w.days[d] {
				return fmt.Errorf("days %q: %s is named twice", s, dayNames[d])
			}
			w.days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

func day(s string) (int, error) {
	for i, n := range dayNames {
		if strings.EqualFold(s, n) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("day %q: want Mon, Tue, Wed, Thu, Fri, Sat or Sun", s)
}

// clock reads HH:MM as minutes after midnight; 24:00 only as an end.
func clock(s string, end bool) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	bad := fmt.Errorf("time %q: want HH:MM, 00:00 to 23:59 (24:00 as an end)", s)
	if !ok || len(hh) != 2 || len(mm) != 2 {
		return 0, bad
	}
	h, err1 := strconv.Atoi(hh)
	m, err2 := strconv.Atoi(mm)
	switch {
	case err1 != nil || err2 != nil || hh[0] == '+' || mm[0] == '+' || hh[0] == '-' || mm[0] == '-':
		return 0, bad
	case end && h == 24 && m == 0:
		return 1440, nil
	case h > 23 || m > 59:
		return 0, bad
	}
	return h*60 + m, nil
}

// zone loads an IANA zone by name; "Local" and offsets are refused.
func zone(name string) (*time.Location, error) {
	if name == "" || strings.EqualFold(name, "local") || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("time zone %q: want an IANA name such as Europe/Berlin, or UTC", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: unknown (want an IANA name such as Europe/Berlin, or UTC)", name)
	}
	return loc, nil
}

// String is the window as given (whitespace normalised).
func (w *Window) String() string { return w.text }

// Location is the window's time zone.
func (w *Window) Location() *time.Location { return w.loc }

// Open reports whether the window is open at t.
func (w *Window) Open(t time.Time) bool {
	l := t.In(w.loc)
	tod := l.Hour()*60 + l.Minute()
	today := int(l.Weekday())
	if w.end > w.start {
		return w.days[today] && tod >= w.start && tod < w.end
	}
	// Across midnight: the evening of an opening day, or the morning after one.
	return (w.days[today] && tod >= w.start) || (w.days[(today+6)%7] && tod < w.end)
}

// horizon bounds the searches: any window opens within a week, and the
// second week covers a daylight-saving change that swallowed an opening.
const horizon = 15 * 24 * 60

// NextOpen is the first time at or after t at which the window is open
// (t itself when open), to the minute; zero if none within two weeks.
func (w *Window) NextOpen(t time.Time) time.Time {
	return w.scan(t, true)
}

// CloseAt is the first time after t at which the window is closed (t
// itself when closed), to the minute.
func (w *Window) CloseAt(t time.Time) time.Time {
	return w.scan(t, false)
}

// scan steps minute by minute — the wall clock changes only on minute
// boundaries in every zone in use — for the first time the window's state
// is open.
func (w *Window) scan(t time.Time, open bool) time.Time {
	if w.Open(t) == open {
		return t
	}
	m := t.Truncate(time.Minute)
	for range horizon {
		m = m.Add(time.Minute)
		if w.Open(m) == open {
			return m
		}
	}
	return time.Time{}
}
