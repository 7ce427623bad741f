package campaign

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/fleet/fleettest"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Every rollbook.dev/ key the ate runbooks write is classified for cleanup:
// removed (CleanupAnnotations), a half-way mark (HalfWay refuses on it) or
// not on a node. A new key fails here until someone decides which.
func TestCleanupClassifiesEveryKey(t *testing.T) {
	notOnNode := map[string]string{
		fleet.AnnClonedFrom:              "on a cloned WorkerPool: how the roll pairs pools, not bookkeeping",
		fleet.AnnSourceGeneration:        "on a cloned WorkerPool: its source's generation when cloned",
		node.AnnRecoveringNode:           "on the Lease, which cleanup deletes",
		"rollbook.dev/backup-of":         "on retire's backup ConfigMaps, the user's backups",
		roll.LabelPullProbe:              "on the pull probe pods, which the roll deletes",
		"rollbook.dev/ate-pull-probe-of": "on the pull probe pods, which the roll deletes",
		fleet.AnnEveryNodeReached:        "on the NEW atelet DaemonSet: a fact the rollback's gate rests on, gone with it",
		fleet.AnnControlPlaneReverted:    "on the NEW atelet DaemonSet: a fact the rollback's gate rests on, gone with it",
		fleet.AnnAPIServerAtReached:      "on the NEW atelet DaemonSet: what step 6 is seen against, gone with it",
		fleet.AnnStep6Seen:               "on the NEW atelet DaemonSet: a fact the rollback's gate rests on, gone with it",
	}
	marks := []string{fleet.AnnMovingTo, fleet.AnnVerifyPending}
	// The keys are written by every layer of ate.
	var files []string
	for _, dir := range []string{"../fleet", "../node", "../roll", "."} {
		f, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f...)
	}
	re := regexp.MustCompile(`"(rollbook\.dev/[a-z0-9.-]+)"`)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			n++
			if k := m[1]; !slices.Contains(CleanupAnnotations, k) && !slices.Contains(marks, k) && notOnNode[k] == "" {
				t.Errorf("%s is not classified for cleanup (CleanupAnnotations, HalfWay, or not on a node)", k)
			}
		}
	}
	if n < 5 {
		t.Fatalf("found only %d keys: the scan is broken", n)
	}
	// Each mark makes a node half-way; no step clock does, nor another
	// plugin's cordon: where a node stands is the Locator's verdict alone.
	at := func(version string, ann map[string]string) string {
		c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": "v1"},
			fleettest.Pool("w", "v1", nil, nil), fleettest.Pool("w-v2", "v2", nil, nil))
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0", Labels: map[string]string{fleet.VersionLabel: version},
			Annotations: ann}}
		c.Nodes[0].Version = version
		c.Nodes[0].MovingTo, c.Nodes[0].VerifyPending = ann[fleet.AnnMovingTo], ann[fleet.AnnVerifyPending]
		c.SetNodeObjects([]corev1.Node{n, {ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{fleet.VersionLabel: "v1"}}}},
			true)
		return halfWay(c, nil)["n0"]
	}
	for k, version := range map[string]string{fleet.AnnMovingTo: "v1", fleet.AnnVerifyPending: "v2"} {
		if at(version, map[string]string{k: "v2"}) == "" {
			t.Errorf("a node with %s is not half-way", k)
		}
	}
	clock := runbook.TimerKey(node.RunbookName)
	for what, ann := range map[string]map[string]string{
		"tt's cordon":                   {"rollbook.dev/cordoned-by": "tt-kmd"},
		"a clock a killed run left":     {clock: "ate.node.verify@2026-01-01T00:00:00Z"},
		"a clock on a node not started": {clock: "ate.node.drain@2026-01-01T00:00:00Z"},
	} {
		for _, version := range []string{"v1", "v2"} {
			if why := at(version, ann); why != "" {
				t.Errorf("%s makes a node at %s half-way for ate: %s", what, version, why)
			}
		}
	}
	// Where the roll's shape is unknown a marked node is not let go.
	c := fleettest.Cluster(fleettest.TwoAtelets, map[string]string{"n0": "v1", "n1": ""})
	c.Nodes[0].MovingTo = "v2"
	if why := halfWay(c, nil)["n0"]; !strings.Contains(why, "cannot be decided") {
		t.Errorf("a marked node in a cluster with problems: %q", why)
	}
}
