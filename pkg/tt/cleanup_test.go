package tt

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every rollbook.dev/ key this package writes is classified for cleanup:
// removed (CleanupAnnotations), a half-way mark (HalfWay refuses on it),
// kept for a person, or not on a node. A new key fails here until someone decides which.
func TestCleanupClassifiesEveryKey(t *testing.T) {
	const sharedModule = "on a shared module's ConfigMap (build once per kernel), kept for later runs; no rollbook role deletes it (README)"
	notOnNode := map[string]string{AnnForceCampaign: "on the Lease, which cleanup deletes",
		LabelSharedModule: sharedModule, "rollbook.dev/tt-kmd-kernel": sharedModule,
		"rollbook.dev/tt-kmd-commit": sharedModule, "rollbook.dev/tt-kmd-sha256": sharedModule}
	halfWay := map[string]bool{AnnGatesPrior: true}
	// Kept: a fact about the board only a person may end (cleanup must not erase it).
	kept := map[string]string{AnnFlashNeedsPerson: "a failed flash that needs a person; a flash after --acknowledge-failed-flash ends it"}
	keys := keysIn(t, ".")
	if len(keys) < 5 {
		t.Fatalf("found only %v: the scan is broken", keys)
	}
	for _, k := range keys {
		if contains(CleanupAnnotations, k) && kept[k] != "" {
			t.Errorf("cleanup removes %s, which it must keep: %s", k, kept[k])
		}
		if !contains(CleanupAnnotations, k) && !halfWay[k] && notOnNode[k] == "" && kept[k] == "" {
			t.Errorf("%s is not classified for cleanup (CleanupAnnotations, HalfWay, or not on a node)", k)
		}
	}
	for k := range halfWay {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: "{}"}}}
		if HalfWay(n) == "" {
			t.Errorf("a node with %s is not half-way", k)
		}
	}
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"rollbook.dev/cordoned-by": KMDRunbookName}}},
		{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"rollbook.dev/tt-firmware.step-started": "tt.fw.flash@2026-01-01T00:00:00Z"}}},
	} {
		if HalfWay(n) == "" {
			t.Errorf("a node with %v is not half-way", n.Annotations)
		}
	}
	ate := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"rollbook.dev/cordoned-by": "ate-node",
		"rollbook.dev/ate-node.step-started": "x@2026-01-01T00:00:00Z", AnnKMDResult: "{}"}}}
	if why := HalfWay(ate); why != "" {
		t.Errorf("ate's marks make a node half-way for tt: %s", why)
	}
}

func keysIn(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"(rollbook\.dev/[a-z0-9.-]+)"`)
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, m[1])
			}
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
