package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/window"
)

// SoakFlags are the pacing flags of the commands that roll many nodes:
// --canary and --soak, and when nodes may start, --window and --stop-at.
type SoakFlags struct {
	Canary int
	Soak   time.Duration
	// Window (nil: always) and StopAt (zero: never) bound when a node may
	// start; parsed as the flags are set.
	Window *window.Window
	StopAt time.Time
	// WaitForWindow waits out a closed window rather than ending paused.
	WaitForWindow bool
	// NotifyURL is --notify-url; badNotifyURL says why it is refused.
	NotifyURL    string
	badNotifyURL error
	notifyURLSet bool
	// notifyEnv is --notify-url-env; badNotifyEnv says why it is refused.
	notifyEnv    string
	badNotifyEnv error
	// MetricsAddr is --metrics-bind-address ("" or "0": none).
	MetricsAddr string
}

// AddFlags registers --canary and --soak.
func (f *SoakFlags) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&f.Canary, "canary", 0, "roll this many nodes first, then --soak before the rest (needs --soak)")
	fs.DurationVar(&f.Soak, "soak", 0, "watch the rolled nodes' health this long before going on: after the --canary nodes, "+
		"or without --canary after every node. A failed check pauses the roll with the reason")
	f.addScheduleFlags(fs)
	f.addNotifyFlag(fs)
	f.addMetricsFlag(fs)
}

// Validate rejects bad values before any API call.
func (f *SoakFlags) Validate() error {
	switch {
	case f.validNotify() != nil:
		return f.validNotify()
	case validMetricsAddr(f.MetricsAddr) != nil:
		return validMetricsAddr(f.MetricsAddr)
	case f.Canary < 0:
		return UsageErrorf("--canary %d: want 0 or more nodes", f.Canary)
	case f.Soak < 0:
		return UsageErrorf("--soak %s: want a positive duration such as 10m", f.Soak)
	case f.Canary > 0 && f.Soak == 0:
		return UsageErrorf("--canary %d needs --soak DURATION: how long to watch the canary nodes before the rest", f.Canary)
	}
	return nil
}

// ApplySoak sets o's canary and soak from f, with health as the check. A
// failed check pauses the roll on the Lease, so a re-run does not simply
// carry on: a person looks, then `resume`s. The window and --stop-at
// pause the run alone, not the Lease: a re-run in the next window goes on.
// It also starts --notify-url's posts and --metrics-bind-address's endpoint;
// an address that cannot be bound is the error, before anything acts.
func (s *Session) ApplySoak(o *runbook.Options, f SoakFlags, health func(ctx context.Context) error) error {
	o.Canary, o.Soak, o.Health = f.Canary, f.Soak, health
	o.OnHealthFailure = s.PauseOnHealthFailure
	s.applySchedule(o, f.Schedule(), f.WaitForWindow)
	s.applyNotify(o, f.NotifyURL)
	return s.applyMetrics(o, f.MetricsAddr)
}

// PauseOnHealthFailure pauses the roll on its Lease because a soak's health
// check failed, and says so.
func (s *Session) PauseOnHealthFailure(ctx context.Context, why string) {
	p := &lease.Pause{By: "rollbook run " + s.RunID, At: time.Now().UTC(), Reason: why}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := lease.SetPause(pctx, s.Client, s.Flags.LockNamespace, s.lockName, p); err != nil {
		s.Progress.Printf("warning: could not record the pause: %v", err)
		return
	}
	s.Progress.Printf("paused the roll: %s\n  look at the nodes, then `kubectl %s resume` and re-run", why, s.plugin)
	s.note(ctx, "Paused", fmt.Sprintf("health check failed: %s", why))
}
