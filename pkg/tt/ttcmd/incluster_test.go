package ttcmd

import (
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/rollbook/rollbook/pkg/cli"
)

// A run that stops for a person (a failed SPI write tt-flash hands to
// one, exit 3) fails the in-cluster Job at once: its pod is never retried.
func TestRunnerJobFailsAtOnceWhenAPersonIsNeeded(t *testing.T) {
	j := RunnerJob("rollbook-system", "firmware", "img@sha256:x", []string{"upgrade", "firmware"}, "me")
	p := j.Spec.PodFailurePolicy
	if p == nil {
		t.Fatal("no pod failure policy: exit 3 would be retried up to backoffLimit")
	}
	for _, r := range p.Rules {
		if r.Action == batchv1.PodFailurePolicyActionFailJob && r.OnExitCodes != nil &&
			r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && slices.Contains(r.OnExitCodes.Values, int32(cli.ExitBlocked)) &&
			r.OnExitCodes.ContainerName != nil && *r.OnExitCodes.ContainerName == runnerContainer {
			return
		}
	}
	t.Fatalf("no FailJob rule on exit %d of %s: %+v", cli.ExitBlocked, runnerContainer, p.Rules)
}
