package atecmd

import (
	"regexp"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

// -o wide adds a row per node: its version, whether it is cordoned, and
// for a node in progress the node runbook's own step (not its marks);
// without wide there is no per-node table.
func TestStatusWideListsEveryNode(t *testing.T) {
	s := &campaign.Status{Phase: "Rolling", Summary: "1 of 3 at NEW", Counts: map[string]int{"v1": 2, "v2": 1},
		Cluster: &fleet.Cluster{Old: "v1", New: "v2", Nodes: []fleet.NodeInfo{{Name: "n1", Version: "v2"},
			{Name: "n2", Version: "v1", Cordoned: true}, {Name: "a-very-long-cloud-node-name-0123456789", Version: "v1"}}},
		Nodes: []campaign.NodeProgress{{Node: "n2", Version: "v1", Direction: "roll", Step: "suspend (2 actors)", Next: "kubectl ate roll next-node n2"}}}
	var narrow, wide strings.Builder
	printStatus(&narrow, s, false)
	printStatus(&wide, s, true)
	if strings.Contains(narrow.String(), "IN PROGRESS") {
		t.Errorf("the node table without -o wide:\n%s", narrow.String())
	}
	for _, row := range []string{`n1\s+v2\s+false\s+-`, `n2\s+v1\s+true\s+roll: suspend \(2 actors\)`,
		`a-very-long-cloud-node-name-0123456789\s+v1\s+false\s+-`} {
		if !regexp.MustCompile(`(?m)^` + row + `\s*$`).MatchString(wide.String()) {
			t.Errorf("-o wide lacks the row %s:\n%s", row, wide.String())
		}
	}
}
