package window

import (
	"fmt"
	"strings"
	"time"
)

// Schedule is when a roll may start nodes: inside Window (nil: always)
// and before StopAt (zero: no limit).
type Schedule struct {
	Window *Window
	StopAt time.Time
}

// ParseStopAt reads --stop-at: an RFC 3339 time, or a positive duration
// from now (2h30m). Its result is absolute, so a run handed on (an
// in-cluster Job, a re-run) stops at the same moment.
func ParseStopAt(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("stop-at %q: want an RFC 3339 time (2026-03-01T06:00:00+01:00) or a positive "+
			"duration from now (2h30m)", s)
	}
	return now.Add(d).Truncate(time.Second), nil
}

// Verdict is what a Schedule says at one moment.
type Verdict struct {
	// Open: a node may start now.
	Open bool
	// Reason says why not (when not Open).
	Reason string
	// Next is when the window opens next; zero when it never will for
	// this schedule (StopAt passed) or it is open.
	Next time.Time
}

// At judges the schedule at now.
func (s Schedule) At(now time.Time) Verdict {
	if !s.StopAt.IsZero() && !now.Before(s.StopAt) {
		return Verdict{Reason: fmt.Sprintf("--stop-at %s has passed", s.StopAt.Format(time.RFC3339))}
	}
	if s.Window == nil || s.Window.Open(now) {
		return Verdict{Open: true}
	}
	v := Verdict{Reason: fmt.Sprintf("outside the maintenance window %q", s.Window.String())}
	if next := s.Window.NextOpen(now); !next.IsZero() && (s.StopAt.IsZero() || next.Before(s.StopAt)) {
		v.Next = next.In(s.Window.Location())
	}
	return v
}

// Until is how the schedule limits a run started at now, for the run's
// first line: "" when it does not.
func (s Schedule) Until(now time.Time) string {
	var parts []string
	if s.Window != nil && s.Window.Open(now) {
		if end := s.Window.CloseAt(now); !end.IsZero() {
			parts = append(parts, fmt.Sprintf("window %q closes %s", s.Window.String(), When(end, now, s.Window.Location())))
		}
	}
	if !s.StopAt.IsZero() {
		parts = append(parts, "--stop-at "+When(s.StopAt, now, s.StopAt.Location()))
	}
	if len(parts) == 0 {
		return ""
	}
	return "no node starts after " + strings.Join(parts, ", or after ")
}

// When writes t for a person: in loc, with how far it is from now.
func When(t, now time.Time, loc *time.Location) string {
	return fmt.Sprintf("%s (in %s)", t.In(loc).Format("Mon 2006-01-02 15:04 MST"), roundUp(t.Sub(now)))
}

// roundUp is d to the minute, up ("in 0m" would say it is now), as
// 23h0m or 5m.
func roundUp(d time.Duration) string {
	if d <= 0 {
		return "0m"
	}
	if r := d.Truncate(time.Minute); r < d {
		d = r + time.Minute
	}
	return strings.TrimSuffix(d.String(), "0s")
}
