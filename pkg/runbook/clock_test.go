package runbook

import (
	"slices"
	"testing"
)

func TestStepsInProgress(t *testing.T) {
	ann := map[string]string{
		TimerKey("tt-kmd"):           "tt.kmd.drain@2026-12-02T01:00:00Z",
		TimerKey("tt-firmware"):      "tt.firmware.flash@2026-12-02T01:00:00Z",
		TimerKey("ate-node"):         "ate.node.verify@2026-12-02T01:00:00Z",
		"rollbook.dev/tt-kmd-result": "{}",
	}
	if got := StepsInProgress(ann, "tt-"); !slices.Equal(got, []string{"tt.firmware.flash", "tt.kmd.drain"}) {
		t.Errorf("tt- steps: %v", got)
	}
	if got := StepsInProgress(ann, "ate-"); !slices.Equal(got, []string{"ate.node.verify"}) {
		t.Errorf("ate- steps: %v", got)
	}
}
