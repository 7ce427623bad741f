package campaign

import (
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/ateapi"
)

// The runbook upgrades the API server last (step 6, after the dataplane):
// preflight's advice for an API without RevertActor must not reverse that.
func TestPreflightRevertActorAdviceKeepsTheRunbooksOrder(t *testing.T) {
	for _, c := range apiChecks(&ateapi.Capabilities{Era: "v1", DrainImplemented: true}, nil) {
		if !strings.Contains(c.Name, "RevertActor") {
			continue
		}
		if c.OK || strings.Contains(c.Fix, "upgrade the API server first") || !strings.Contains(c.Fix, "step 6") {
			t.Errorf("RevertActor check: ok %v, fix %q; want a failed check whose fix waits for step 6", c.OK, c.Fix)
		}
		return
	}
	t.Error("no RevertActor check")
}
