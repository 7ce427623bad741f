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
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
)

// Every rollbook.dev/ key the ate runbooks write is classified for cleanup:
// removed (CleanupAnnotations), a half-way mark (HalfWay refuses on it) or
// not on a node. A new key fails here until someone decides which.
func TestCleanupClassifiesEveryKey(t *testing.T) {
	notOnNode := map[string]string{
		fleet.AnnClonedFrom:              "on a cloned WorkerPool: how the roll pairs pools, not bookkeeping",
		node.AnnRecoveringNode:           "on the Lease, which cleanup deletes",
		"rollbook.dev/backup-of":         "on retire's backup ConfigMaps, the user's backups",
		roll.LabelPullProbe:              "on the pull probe pods, which the roll deletes",
		"rollbook.dev/ate-pull-probe-of": "on the pull probe pods, which the roll deletes",
	}
	halfWay := []string{fleet.AnnMovingTo, fleet.AnnVerifyPending}
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
			if k := m[1]; !slices.Contains(CleanupAnnotations, k) && !slices.Contains(halfWay, k) && notOnNode[k] == "" {
				t.Errorf("%s is not classified for cleanup (CleanupAnnotations, HalfWay, or not on a node)", k)
			}
		}
	}
	if n < 5 {
		t.Fatalf("found only %d keys: the scan is broken", n)
	}
	for _, k := range halfWay {
		if HalfWay(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: "v0.3.0"}}}) == "" {
			t.Errorf("a node with %s is not half-way", k)
		}
	}
	tt := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"rollbook.dev/cordoned-by": "tt-kmd"}}}
	if why := HalfWay(tt); why != "" {
		t.Errorf("tt's cordon makes a node half-way for ate: %s", why)
	}
}
