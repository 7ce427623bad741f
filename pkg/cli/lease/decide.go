package lease

import (
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
)

// Record is a Lease's holder as read from the Lease.
type Record struct {
	// Identity is spec.holderIdentity; "" when the Lease is free.
	Identity string
	// Holder is what the holder annotations say of it.
	Holder Holder
	// Duration is the holder's own lease duration (0 when unset): it
	// fences itself by that, so that is what a watcher waits out.
	Duration time.Duration
}

// RecordOf reads the holder record of l; nil for no Lease.
func RecordOf(l *coordv1.Lease) *Record {
	if l == nil {
		return nil
	}
	r := &Record{Identity: heldBy(l), Holder: holderOf(l)}
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		r.Duration = time.Duration(*d) * time.Second
	}
	return r
}

// Facts are what this machine knows, by its own means, about the holder
// of a Lease.
type Facts struct {
	// MachineID, BootID and PIDNamespace are this host's (Local).
	MachineID, BootID, PIDNamespace string
	// Process is what runs under the holder's pid on this host; it says
	// something of the holder only when the holder ran on this host, in
	// this boot and pid namespace.
	Process Process
	// Unchanged is how long this machine has watched the Lease unchanged,
	// by its own clock: never the holder's renewTime, which another
	// machine's clock wrote.
	Unchanged time.Duration
	// Changed says the Lease changed while this machine watched it: its
	// holder renewed it, or it was released or taken.
	Changed bool
}

// Policy is how Decide judges a holder that is not provably gone.
type Policy struct {
	// Steal takes over even from a live holder (--steal-lock).
	Steal bool
	// Duration is this run's lease duration; Margin is added to a
	// holder's duration (scaled to it from Duration) before a Lease
	// watched unchanged counts as abandoned.
	Duration, Margin time.Duration
}

// Action is what Acquire does next.
type Action int

// The actions Decide chooses from.
const (
	// Create the Lease: there is none.
	Create Action = iota + 1
	// Claim a Lease that is free (or already this run's).
	Claim
	// TakeOver from a holder that is gone or stolen from.
	TakeOver
	// Refuse: a live run holds it.
	Refuse
	// Watch the Lease until it changes or has stayed unchanged for Wait.
	Watch
)

// String names the action, for messages and test failures.
func (a Action) String() string {
	switch a {
	case Create:
		return "create"
	case Claim:
		return "claim"
	case TakeOver:
		return "take over"
	case Refuse:
		return "refuse"
	case Watch:
		return "watch"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is Decide's verdict.
type Decision struct {
	Action Action
	// Holder is the holder taken over from, refused or watched.
	Holder Holder
	// Reason says why a TakeOver may take over.
	Reason string
	// Wait is, for Watch, how long in all the Lease must stay unchanged
	// before its holder counts as gone.
	Wait time.Duration
}

// ReasonSteal is the Reason of a --steal-lock takeover.
const ReasonSteal = "--steal-lock"

// Decide is the lock's rule, a pure function of what was read and what
// this machine knows: cur is the Lease's holder record (nil: no Lease),
// me this run. A holder is provably gone only when it ran on this very
// host, boot and pid namespace and its process no longer exists there;
// provably alive only when that process still runs. Any other holder is
// watched, and counts as gone once this machine has seen the Lease
// unchanged for the holder's duration plus a margin; a change seen while
// watching means it is alive.
func Decide(cur *Record, me Holder, f Facts, p Policy) Decision {
	switch {
	case cur == nil:
		return Decision{Action: Create}
	case cur.Identity == "" || cur.Identity == me.Identity():
		return Decision{Action: Claim}
	}
	h := cur.Holder
	switch {
	case p.Steal:
		return Decision{Action: TakeOver, Holder: h, Reason: ReasonSteal}
	case f.gone(h):
		return Decision{Action: TakeOver, Holder: h,
			Reason: fmt.Sprintf("its process (pid %d on %s) no longer exists", h.PID, h.Host)}
	case f.alive(h), f.Changed:
		return Decision{Action: Refuse, Holder: h}
	}
	wait := AbandonedAfter(cur.Duration, p)
	if f.Unchanged >= wait {
		return Decision{Action: TakeOver, Holder: h,
			Reason: fmt.Sprintf("not renewed for %s as seen from this machine", wait.Round(time.Second))}
	}
	return Decision{Action: Watch, Holder: h, Wait: wait}
}

// AbandonedAfter is how long a Lease whose holder's duration is theirs (0:
// unknown, taken as p.Duration) must be seen unchanged before it counts as
// abandoned: that duration plus the margin scaled to it, at least a second.
func AbandonedAfter(theirs time.Duration, p Policy) time.Duration {
	if theirs <= 0 || p.Duration <= 0 {
		return p.Duration + p.Margin
	}
	margin := time.Duration(float64(p.Margin) * float64(theirs) / float64(p.Duration))
	return theirs + max(margin, time.Second)
}

// sameHost: h ran on this host, in this boot and pid namespace, so its pid
// means here what it meant there. Every identifier must be known and
// equal: a hostname proves nothing, a machine ID alone may be a cloned
// image's, and a differing boot ID may be a clone's as well as a reboot's.
func (f Facts) sameHost(h Holder) bool {
	return h.MachineID != "" && h.MachineID == f.MachineID &&
		h.BootID != "" && h.BootID == f.BootID &&
		h.PIDNamespace != "" && h.PIDNamespace == f.PIDNamespace
}

// gone: h's process no longer exists (its pid is free or another
// process's).
func (f Facts) gone(h Holder) bool {
	if !f.sameHost(h) || h.PID <= 0 || !f.Process.Known {
		return false
	}
	return !f.Process.Exists || h.Start != "" && f.Process.Start != "" && f.Process.Start != h.Start
}

// alive: h's very process still runs.
func (f Facts) alive(h Holder) bool {
	return f.sameHost(h) && h.PID > 0 && f.Process.Known && f.Process.Exists &&
		h.Start != "" && f.Process.Start == h.Start
}
