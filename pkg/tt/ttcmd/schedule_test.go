package ttcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/clitest"
	"github.com/rollbook/rollbook/pkg/cli"
)

// closedWindow is a daily window that opens two hours from now (UTC).
func closedWindow() string {
	from := time.Now().UTC().Add(2 * time.Hour)
	return fmt.Sprintf("%s-%s UTC", from.Format("15:04"), from.Add(time.Hour).Format("15:04"))
}

// --window and --stop-at are judged before the cluster is: a bad one is
// bad input (exit 2), and a closed window or a passed --stop-at ends the
// run as paused (exit 0) saying when and what to re-run, both without a
// request to the (unreachable) API server.
func TestScheduleIsJudgedBeforeTheCluster(t *testing.T) {
	kc := clitest.UnreachableKubeconfig(t)
	run := func(args ...string) (string, string, int) {
		streams, _, out, errOut := genericiooptions.NewTestIOStreams()
		args = append(args, "--kubeconfig", kc, "--helper-image", "example.com/node-agent@sha256:"+strings.Repeat("b", 64))
		code := cli.ExecuteContext(context.Background(), NewRootCommand(streams), args, errOut)
		return out.String(), errOut.String(), code
	}
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for _, up := range [][]string{{"upgrade", "kmd", "--version", "2.8.0"}, {"upgrade", "smi", "--version", "3.0.12"},
		{"upgrade", "firmware", "--version", "18.7.0", "--bundle-sha256", strings.Repeat("a", 64)}} {
		with := func(extra ...string) []string { return append(append([]string{}, up...), extra...) }
		for _, bad := range [][]string{{"--window", "Mon-Fri 01:00-05:00"}, {"--window", "Mon-Fri 1:00-05:00 UTC"},
			{"--window", "01:00-05:00 Local"}, {"--stop-at", "tomorrow"}, {"--stop-at", "-1h"},
			{"--notify-url", "http://example.com/hook"}, {"--notify-url", "https://u:p@example.com/hook"}} {
			out, errOut, code := run(with(bad...)...)
			if code != cli.ExitUsage || strings.Contains(out+errOut, "127.0.0.1:1") || !strings.Contains(errOut, strings.TrimPrefix(bad[0], "--")) ||
				strings.Contains(errOut, "/hook") {
				t.Errorf("%v %v: exit %d, want 2 naming the flag (not a URL's path), before the cluster\n%s%s", up, bad, code, out, errOut)
			}
		}
		for _, closed := range [][]string{{"--window", closedWindow()}, {"--stop-at", past}} {
			out, errOut, code := run(with(closed...)...)
			if code != cli.ExitOK || strings.Contains(out+errOut, "127.0.0.1") || !strings.Contains(out, "paused before starting") ||
				!strings.Contains(out, "kubectl tt "+strings.Join(up[:2], " ")) {
				t.Errorf("%v %v: exit %d, want 0 paused with the command to re-run, before the cluster\n%s%s", up, closed, code, out, errOut)
			}
			out, errOut, code = run(with(append(closed, "-o", "json")...)...)
			var doc struct{ Outcome, Stopped string }
			if err := json.Unmarshal([]byte(out), &doc); err != nil || code != cli.ExitOK || doc.Outcome != "paused" || doc.Stopped == "" {
				t.Errorf("%v %v -o json: exit %d, %v\n%s%s", up, closed, code, err, out, errOut)
			}
		}
		// A run that waits for its window starts (and waits before its first node).
		if out, errOut, _ := run(with("--window", closedWindow(), "--wait-for-window")...); !strings.Contains(out+errOut, "127.0.0.1:1") {
			t.Errorf("%v --wait-for-window outside the window did not go on to the cluster:\n%s%s", up, out, errOut)
		}
		// A dry run plans anyway (it reaches the cluster) and notes the window.
		_, errOut, _ := run(with("--window", closedWindow(), "--dry-run")...)
		if !strings.Contains(errOut, "note: outside the maintenance window") || !strings.Contains(errOut, "127.0.0.1") {
			t.Errorf("%v --dry-run outside the window:\n%s", up, errOut)
		}
	}
}

// An in-cluster run is handed --stop-at as the absolute time it was
// given, not the duration: the Job stops when the terminal's run would.
func TestInClusterRunGetsAbsoluteStopAt(t *testing.T) {
	root := NewRootCommand(genericiooptions.NewTestIOStreamsDiscard())
	cmd, _, err := root.Find([]string{"upgrade", "kmd"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := cmd.ParseFlags([]string{"--version", "2.8.0", "--stop-at", "4h", "--window", "Mon-Fri  01:00-05:00 Europe/Berlin"}); err != nil {
		t.Fatal(err)
	}
	waitForWindow(cmd.Flags())
	args := strings.Join(runnerArgs(cmd, "img"), " ")
	want := before.Add(4 * time.Hour).Truncate(time.Second)
	var got time.Time
	for _, a := range runnerArgs(cmd, "img") {
		if v, ok := strings.CutPrefix(a, "--stop-at="); ok {
			got, err = time.Parse(time.RFC3339, v)
		}
	}
	if err != nil || got.Sub(want) < 0 || got.Sub(want) > 2*time.Second {
		t.Errorf("Job args %s: --stop-at %s, want about %s", args, got, want)
	}
	if !strings.Contains(args, "--window=Mon-Fri 01:00-05:00 Europe/Berlin") || !strings.Contains(args, "--wait-for-window=true") {
		t.Errorf("Job args %s: want the window passed on, and the Job to wait for it", args)
	}
	cmd, _, _ = NewRootCommand(genericiooptions.NewTestIOStreamsDiscard()).Find([]string{"upgrade", "kmd"})
	if err := cmd.ParseFlags([]string{"--version", "2.8.0", "--window", "01:00-05:00 UTC", "--wait-for-window=false"}); err != nil {
		t.Fatal(err)
	}
	waitForWindow(cmd.Flags())
	if args := strings.Join(runnerArgs(cmd, "img"), " "); !strings.Contains(args, "--wait-for-window=false") {
		t.Errorf("Job args %s: --wait-for-window=false must stay", args)
	}
}

// --notify-url keeps its secret (the path) out of an in-cluster Job's
// spec: the Job's pod reads it from the Secret, as an env var.
func TestInClusterNotifyURLGoesThroughASecret(t *testing.T) {
	for _, given := range [][]string{{"--notify-url", "https://hooks.example/services/SECRET"},
		{"--notify-url-env", "HOOK"}} {
		t.Setenv("HOOK", "https://hooks.example/services/SECRET")
		cmd, _, _ := NewRootCommand(genericiooptions.NewTestIOStreamsDiscard()).Find([]string{"upgrade", "kmd"})
		if err := cmd.ParseFlags(append([]string{"--version", "2.8.0", "--nodes", "a"}, given...)); err != nil {
			t.Fatal(err)
		}
		url := handNotifyToSecret(cmd.Flags())
		args := runnerArgs(cmd, "img")
		spec, err := json.Marshal(RunnerJob(deploy.RunnerNamespace, "kmd", "img", args, "me"))
		if err != nil {
			t.Fatal(err)
		}
		if url != "https://hooks.example/services/SECRET" || strings.Contains(string(spec), "SECRET") ||
			!slices.Contains(args, "--notify-url-env="+deploy.RunnerNotifyEnv) {
			t.Errorf("%v: handed on %q; the Job's args %v", given, url, args)
		}
		var ref *corev1.SecretKeySelector
		for _, e := range RunnerJob(deploy.RunnerNamespace, "kmd", "img", args, "me").Spec.Template.Spec.Containers[0].Env {
			if e.Name == deploy.RunnerNotifyEnv && e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil || ref.Name != deploy.RunnerNotifySecret || ref.Key != deploy.RunnerNotifyKey || ref.Optional != nil {
			t.Errorf("%v: the Job's pod does not read $%s from Secret %s: %+v", given, deploy.RunnerNotifyEnv,
				deploy.RunnerNotifySecret, ref)
		}
	}
	// Without --notify-url the Job reads no Secret.
	cmd, _, _ := NewRootCommand(genericiooptions.NewTestIOStreamsDiscard()).Find([]string{"upgrade", "kmd"})
	if err := cmd.ParseFlags([]string{"--version", "2.8.0"}); err != nil {
		t.Fatal(err)
	}
	if url := handNotifyToSecret(cmd.Flags()); url != "" {
		t.Errorf("no --notify-url handed on %q", url)
	}
	if env := RunnerJob(deploy.RunnerNamespace, "kmd", "img", runnerArgs(cmd, "img"), "me").Spec.Template.Spec.Containers[0].Env; len(env) != 1 {
		t.Errorf("a Job without --notify-url has env %+v", env)
	}
}
