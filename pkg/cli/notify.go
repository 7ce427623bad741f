package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollbook/rollbook/pkg/notify"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// notifyURLValue is --notify-url, checked as it is set; a bad one is
// reported by Validate (exit 2, before anything reads the cluster), not
// by the flag parser, which would echo the URL, whose path is a secret.
type notifyURLValue struct{ f *SoakFlags }

func (v notifyURLValue) String() string { return v.f.NotifyURL }

func (v notifyURLValue) Set(s string) error {
	v.f.NotifyURL, v.f.badNotifyURL, v.f.notifyURLSet = s, notify.ValidateURL(s), true
	return nil
}

func (notifyURLValue) Type() string { return "url" }

// notifyEnvValue is --notify-url-env, the name of an environment variable
// holding the URL: how an in-cluster run's pod is given it (from a
// Secret), so the URL is in no pod spec or argv.
type notifyEnvValue struct{ f *SoakFlags }

var envName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

func (v notifyEnvValue) String() string { return v.f.notifyEnv }

func (v notifyEnvValue) Set(name string) error {
	v.f.notifyEnv = name
	switch url := os.Getenv(name); {
	case !envName.MatchString(name):
		v.f.badNotifyEnv = fmt.Errorf("--notify-url-env %q: want an environment variable's name (A-Z, 0-9, _)", name)
	case url == "":
		v.f.badNotifyEnv = fmt.Errorf("--notify-url-env: $%s is empty or unset", name)
	default:
		v.f.NotifyURL, v.f.badNotifyEnv = url, notify.ValidateURL(url)
	}
	return nil
}

func (notifyEnvValue) Type() string { return "name" }

func (f *SoakFlags) addNotifyFlag(fs *pflag.FlagSet) {
	fs.Var(notifyURLValue{f}, "notify-url", "post the roll's events (node blocked, node failed, paused, "+
		"resumed, done) as JSON with a Slack-compatible \"text\" to this webhook: https, or http to a loopback address. "+
		"Posting never holds the roll up; the URL is kept out of the Lease, the history and an in-cluster Job's spec")
	fs.Var(notifyEnvValue{f}, "notify-url-env", "read --notify-url from this environment variable (an in-cluster run's "+
		"pod is given it from a Secret)")
	_ = fs.MarkHidden("notify-url-env")
}

// validNotify says why the notification flags are refused, or nil.
func (f *SoakFlags) validNotify() error {
	switch {
	case f.notifyEnv != "" && f.notifyURLSet:
		return UsageErrorf("--notify-url and --notify-url-env: give one")
	case f.badNotifyURL != nil:
		return UsageErrorf("%v", f.badNotifyURL)
	case f.badNotifyEnv != nil:
		return UsageErrorf("%v", f.badNotifyEnv)
	}
	return nil
}

// The session's notification state: notifier posts to --notify-url (nil
// without it); contextName is the kube context the run acts on.

// applyNotify posts the run's events to url: the nodes that block or
// fail as they do, and (Finish) how the run ends. A run that starts
// where the last one paused says it resumed.
func (s *Session) applyNotify(o *runbook.Options, url string) {
	if url == "" || s.DryRun() {
		return
	}
	s.notifier = notify.New(url, func(msg string) { s.Progress.Printf("%s", msg) })
	if s.lock != nil {
		var last RunProgress
		if v, ok := s.lock.Annotation(AnnProgress); ok && json.Unmarshal([]byte(v), &last) == nil &&
			last.Outcome == runbook.OutcomePaused {
			s.notify(notify.Event{Kind: notify.Resumed, Text: fmt.Sprintf("%s resumed the roll that run %s paused", s.who(), last.Run)})
		}
	}
	if o.Reporter == nil {
		o.Reporter = s.Progress
	}
	o.Reporter = notifyReporter{o.Reporter, s}
}

// notifyReporter posts the nodes that block or fail.
type notifyReporter struct {
	runbook.Reporter
	s *Session
}

func (r notifyReporter) TargetDone(t runbook.TargetResult) {
	r.Reporter.TargetDone(t)
	kind := map[runbook.Outcome]string{runbook.OutcomeBlocked: notify.NodeBlocked, runbook.OutcomeFailed: notify.NodeFailed}[t.Outcome]
	if kind == "" {
		return
	}
	why := stopReason(t)
	r.s.notify(notify.Event{Kind: kind, Node: t.Target, Outcome: string(t.Outcome), Reason: why,
		Text: fmt.Sprintf("%s: %s %s at %s: %s", r.s.who(), t.Target, t.Outcome, t.State, why)})
}

// notifyEnd posts how the run ended (paused or done) and delivers what
// is queued, for a bounded time.
func (s *Session) notifyEnd(r runbook.Result) {
	if s.notifier == nil {
		return
	}
	done, total := 0, len(r.Targets)
	for _, t := range r.Targets {
		if t.Outcome == runbook.OutcomeDone {
			done++
		}
	}
	switch r.Outcome {
	case runbook.OutcomeDone:
		s.notify(notify.Event{Kind: notify.Done, Outcome: string(r.Outcome), Done: done, Total: total,
			Text: fmt.Sprintf("%s: done, %d of %d", s.who(), done, total)})
	case runbook.OutcomePaused:
		why := r.Stopped
		if s.scheduleWhy != "" {
			why = s.scheduleWhy
		}
		s.notify(notify.Event{Kind: notify.Paused, Outcome: string(r.Outcome), Reason: why, Done: done, Total: total,
			Text: fmt.Sprintf("%s: paused, %d of %d done: %s", s.who(), done, total, why)})
	}
}

// closeNotifier delivers the queued events, for at most notify.Timeout
// past the post in flight.
func (s *Session) closeNotifier() {
	if s.notifier == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*notify.Timeout)
	defer cancel()
	if err := s.notifier.Close(ctx); err != nil {
		s.Progress.Printf("warning: %v", err)
	}
	s.notifier = nil
}

func (s *Session) notify(e notify.Event) {
	if s.notifier == nil {
		return
	}
	e.Plugin, e.Run, e.Context = s.plugin, s.RunID, s.contextName
	e.Time = time.Now().UTC()
	s.notifier.Send(e)
}

// who names the run in a notification: plugin, run and kube context.
func (s *Session) who() string {
	return fmt.Sprintf("kubectl %s run %s on %q", s.plugin, s.RunID, s.contextName)
}

// ContextName is the kube context the command acts in (--context, else
// the kubeconfig's current one; "" when the kubeconfig is unreadable).
func (g *Globals) ContextName() string {
	if c := g.ConfigFlags.Context; c != nil && *c != "" {
		return *c
	}
	raw, err := g.ConfigFlags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return ""
	}
	return raw.CurrentContext
}
