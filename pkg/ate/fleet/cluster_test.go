package fleet_test

import (
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
)

func TestInferProblems(t *testing.T) {
	for _, tc := range []struct {
		name    string
		atelets []fleet.Atelet
		nodes   map[string]string
		want    string
	}{
		{"third DaemonSet", append(fleettest.TwoAtelets, fleet.Atelet{Name: "atelet-v3", Version: "v3", Versioned: true}), map[string]string{"n0": "v1"},
			"a third one means"},
		{"unversioned", []fleet.Atelet{{Name: "atelet", Version: ""}}, map[string]string{"n0": "v1"}, "predates versioned builds"},
		{"unlabelled node", fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": ""}, "without ate.dev/substrate-version"},
		{"odd version", fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v9"}, "neither OLD nor NEW"},
		{"none", nil, map[string]string{"n0": "v1"}, "no atelet DaemonSet"},
	} {
		c := fleettest.Cluster(tc.atelets, tc.nodes)
		if !strings.Contains(strings.Join(c.Problems, "|"), tc.want) {
			t.Errorf("%s: problems %v, want %q", tc.name, c.Problems, tc.want)
		}
	}
	if c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v2"}); len(c.Problems) != 0 || c.Old != "v1" || c.New != "v2" {
		t.Errorf("healthy: %+v", c)
	}
}
