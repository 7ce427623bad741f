package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/ui"
)

// RunInfo is the roll's run as status documents carry it (-o json|yaml):
// who holds the lock, how far the run is, its ETA, and the pause.
type RunInfo struct {
	// Holder is the run holding the lock; absent when none does.
	Holder *RunHolder `json:"holder,omitempty"`
	// Progress is the holder's progress, or the last run's with its outcome.
	Progress *RunProgress `json:"progress,omitempty"`
	// ETASeconds is the time left of the holder's run, once a node of it
	// was measured.
	ETASeconds *float64     `json:"etaSeconds,omitempty"`
	Paused     *lease.Pause `json:"paused,omitempty"`
}

// RunHolder names the run holding the lock (never a credential).
type RunHolder struct {
	Run     string `json:"run"`
	User    string `json:"user"`
	Host    string `json:"host"`
	Command string `json:"command,omitempty"`
	// Stale: the holder stopped renewing the lock (killed, or its host gone).
	Stale bool `json:"stale,omitempty"`
}

// ReadRunInfo reads the Lease ns/name once; a missing Lease is no run.
func ReadRunInfo(ctx context.Context, cs kubernetes.Interface, ns, name string) (RunInfo, error) {
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return RunInfo{}, nil
	}
	if err != nil {
		return RunInfo{}, err
	}
	return RunInfoOf(l, time.Now()), nil
}

// RunInfoOf is RunInfo from a Lease already read.
func RunInfoOf(l *coordv1.Lease, now time.Time) RunInfo {
	st := RunStateOf(l, now)
	var ri RunInfo
	ri.Paused = st.Pause
	if st.Held {
		ri.Holder = &RunHolder{Run: st.Holder.RunID, User: st.Holder.User, Host: st.Holder.Host, Command: st.Holder.Command,
			Stale: st.Expired}
	}
	if p := st.Progress; p.Run != "" && (!st.Held || p.Run == st.Holder.RunID) {
		ri.Progress = &p
		if eta, ok := EstimateETA(p, nil); ok && st.Held {
			s := eta.Left.Seconds()
			ri.ETASeconds = &s
		}
	}
	return ri
}

// AddOutputFlag registers -o with formats (ui.OutputFormats: "jsonpath"
// stands for every template form), its help and its completion.
func AddOutputFlag(cmd *cobra.Command, output *string, formats ...string) {
	cmd.Flags().StringVarP(output, "output", "o", "", "output format: "+outputHelp(formats))
	_ = cmd.RegisterFlagCompletionFunc("output", completeOutput(formats))
}

func outputHelp(formats []string) string {
	var shown []string
	for _, f := range formats {
		if f == "jsonpath" {
			shown = append(shown, "jsonpath=TEMPLATE", "go-template=TEMPLATE", "custom-columns=SPEC")
			continue
		}
		shown = append(shown, f)
	}
	return strings.Join(shown, "|") + " (the templates as kubectl get has them, also their -file forms; missing keys print nothing)"
}

func completeOutput(formats []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		dir := cobra.ShellCompDirectiveNoFileComp
		for _, f := range ui.OutputFormats(formats...) {
			if slices.Contains(ui.OutputFormats("jsonpath"), f) { // a template follows, not a space
				f += "="
				dir |= cobra.ShellCompDirectiveNoSpace
			}
			out = append(out, f)
		}
		return out, dir
	}
}
