package roll

import (
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
)

func TestRollPreconditions(t *testing.T) {
	old := fleettest.Pool("small", "v1", nil, nil)
	clone := fleettest.Pool("small-v2", "v2", nil, nil)
	clone.ClonedFrom = "ns/small"
	unpinned := fleettest.Pool("scratch", "", nil, nil)
	nodes := map[string]string{"n0": "v1", "n1": "v1"}
	deps := fleet.PoolDeployments{Count: map[string]int{"ns/small": 1, "ns/small-v2": 1}}
	quota := fleet.PoolDeployments{Count: deps.Count, Failure: map[string]string{"ns/small-v2": "Deployment ns/small-v2: FailedCreate: " +
		"pods \"small-v2-x\" is forbidden: exceeded quota: workers"}}
	for _, tc := range []struct {
		name  string
		c     *fleet.Cluster
		deps  fleet.PoolDeployments
		full  bool
		fails string // "" = all pass
	}{
		{"ready", fleettest.Cluster(fleettest.TwoAtelets, nodes, old, clone), deps, false, ""},
		{"no NEW atelet", fleettest.Cluster(fleettest.TwoAtelets[:1], nodes, old), deps, false, "two atelet DaemonSets"},
		{"no clone", fleettest.Cluster(fleettest.TwoAtelets, nodes, old), deps, false, "has a clone pinned to NEW"},
		{"one pool without a clone", fleettest.Cluster(fleettest.TwoAtelets, nodes, old, clone, fleettest.Pool("large", "v1", nil, nil)), deps, false, "no clone: ns/large"},
		{"an unpinned serving pool", fleettest.Cluster(fleettest.TwoAtelets, nodes, old, clone, unpinned), deps, false, "pinned to OLD"},
		{"clone without Deployment", fleettest.Cluster(fleettest.TwoAtelets, nodes, old, clone), fleet.PoolDeployments{Count: map[string]int{"ns/small": 1}}, false,
			"every clone has its Deployment"},
		{"a clone whose pods a ResourceQuota refuses", fleettest.Cluster(fleettest.TwoAtelets, nodes, old, clone), quota, false, "exceeded quota"},
		{"single node", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, old, clone), deps, false, "more than one node"},
		{"single node, full stop accepted", fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1"}, old, clone), deps, true, ""},
	} {
		got := fleet.FailedChecks(RollPreconditions(tc.c, tc.deps, tc.full))
		if (tc.fails == "") != (got == "") || !strings.Contains(got, tc.fails) {
			t.Errorf("%s: failed %q, want %q", tc.name, got, tc.fails)
		}
	}
}

func TestImagesPerSandboxClass(t *testing.T) {
	ref := func(c string) string { return "reg.io/ateom-" + c + "@sha256:" + strings.Repeat("a", 64) }
	for _, tc := range []struct {
		flags   []string
		classes []string
		class   string
		want    string // "" = error
		bad     bool   // refused when parsed
	}{
		{[]string{"gvisor=" + ref("gvisor"), "microvm=" + ref("microvm")}, []string{"gvisor", "microvm"}, "microvm", ref("microvm"), false},
		{[]string{ref("gvisor")}, []string{"gvisor"}, "gvisor", ref("gvisor"), false},
		{[]string{ref("gvisor")}, []string{"gvisor", "microvm"}, "microvm", "", false},
		{[]string{"gvisor=" + ref("gvisor")}, []string{"gvisor", "microvm"}, "microvm", "", false},
		{[]string{"gvisor=reg.io/ateom:v2"}, nil, "", "", true},
		{[]string{"gvisor=" + ref("a"), "gvisor=" + ref("b")}, nil, "", "", true},
		{[]string{ref("a"), ref("b")}, nil, "", "", true},
		{[]string{"Bad_Class=" + ref("a")}, nil, "", "", true},
	} {
		im, err := ParseImages(tc.flags)
		if (err != nil) != tc.bad {
			t.Errorf("ParseImages(%v): %v", tc.flags, err)
			continue
		}
		if tc.bad {
			continue
		}
		classes := map[string]bool{}
		for _, c := range tc.classes {
			classes[c] = true
		}
		got, err := im.For(tc.class, classes)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("%v For(%s) = %q, %v; want %q", tc.flags, tc.class, got, err, tc.want)
		}
	}
}
