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

// An in-cluster run serves its metrics on the pod's port, named, with the
// annotations a pod-discovering Prometheus reads; a run that serves none
// declares no port.
func TestRunnerJobDeclaresItsMetricsPort(t *testing.T) {
	j := RunnerJob("rollbook-system", "kmd", "img@sha256:x", []string{"upgrade", "kmd", "--metrics-bind-address=:9400"}, "me")
	ports := j.Spec.Template.Spec.Containers[0].Ports
	if len(ports) != 1 || ports[0].Name != "metrics" || ports[0].ContainerPort != 9400 {
		t.Fatalf("ports %+v, want metrics 9400", ports)
	}
	if a := j.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9400" {
		t.Fatalf("pod annotations %v", a)
	}
	j = RunnerJob("rollbook-system", "kmd", "img@sha256:x", []string{"upgrade", "kmd", "--metrics-bind-address=0"}, "me")
	if p := j.Spec.Template.Spec.Containers[0].Ports; len(p) != 0 || len(j.Spec.Template.Annotations) != 0 {
		t.Fatalf("a run serving no metrics declares %+v, %v", p, j.Spec.Template.Annotations)
	}
}
