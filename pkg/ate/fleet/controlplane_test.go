package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Every combination of what is recorded and what the API server runs:
// step 6 is said to have run exactly when it was recorded seen since every
// node reached NEW, or the API server runs other images than then; a
// revert told is contradicted exactly when the API server is seen to run
// other images than then. Nothing is said once a revert was recorded, or
// with no images recorded at every-node-reached (an older rollbook).
func TestStep6FollowsWhatWasRecordedAndWhatRuns(t *testing.T) {
	reached := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const before, after = "api:v1", "api:v2"
	for _, reverted := range []bool{false, true} {
		for _, baseline := range []string{"", before} {
			for _, seen := range []string{"", reached.Add(time.Hour).Format(time.RFC3339) + " " + after,
				reached.Add(-time.Hour).Format(time.RFC3339) + " " + after, "garbage"} {
				for _, running := range []string{"", before, after} {
					a := Atelet{Version: "v2", Reached: reached, APIServerAtReached: baseline, Step6Seen: seen}
					if reverted {
						a.Reverted = reached.Add(2 * time.Hour)
					}
					c := &Cluster{Old: "v1", New: "v2", Atelets: []Atelet{{Version: "v1"}, a}, APIServer: running}
					name := fmt.Sprintf("reverted=%v baseline=%q seen=%q running=%q", reverted, baseline, seen, running)
					live := !reverted && baseline != ""
					seenValid := strings.HasSuffix(seen, after) && !strings.HasPrefix(seen, reached.Add(-time.Hour).Format(time.RFC3339))
					wantRan := live && (seenValid || running != "" && running != baseline)
					s := c.Step6()
					if s.Ran != wantRan {
						t.Errorf("%s: ran %v, want %v", name, s.Ran, wantRan)
					}
					if s.Ran && (s.Before != before || s.After != after) {
						t.Errorf("%s: %s", name, s)
					}
					if c.Step6Unrecorded() != (wantRan && !seenValid) {
						t.Errorf("%s: unrecorded %v", name, c.Step6Unrecorded())
					}
					wantStill := live && running == after
					if got := c.StillAfterStep6(); (got != "") != wantStill || wantStill && !strings.Contains(got, after) {
						t.Errorf("%s: still after step 6 %q, want %v", name, got, wantStill)
					}
				}
			}
		}
	}
}

// A controller is behind exactly when every image it runs is tagged OLD;
// a digest, a registry port, another tag or no tag tells nothing.
func TestControllerBehindOnlyWhenEveryImageIsTaggedOld(t *testing.T) {
	for _, tc := range []struct {
		images string
		behind bool
	}{
		{"ghcr.io/agent-substrate/substrate/ate-controller:v1", true},
		{"ghcr.io/agent-substrate/substrate/ate-controller:v1@sha256:abc", true},
		{"registry:5000/ate-controller:v1", true},
		{"registry:5000/ate-controller:v1,registry:5000/sidecar:v1", true},
		{"registry:5000/ate-controller:v1,registry:5000/sidecar:v2", false},
		{"registry:5000/ate-controller", false},
		{"registry:5000/ate-controller@sha256:abc", false},
		{"ko.local/ate-controller@sha256:abc", false},
		{"ghcr.io/agent-substrate/substrate/ate-controller:v2", false},
		{"ghcr.io/agent-substrate/substrate/ate-controller:v1-rc", false},
		{"", false},
	} {
		c := &Cluster{Old: "v1", New: "v2", Controller: tc.images}
		if got := c.ControllerBehind() != ""; got != tc.behind {
			t.Errorf("%q: behind %v, want %v", tc.images, got, tc.behind)
		}
		c.New = ""
		if c.ControllerBehind() != "" {
			t.Errorf("%q: behind with no NEW", tc.images)
		}
	}
}
