package krew

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// krewShortMax is what `krew search` shows of a shortDescription; krew's
// index CI rejects longer ones.
const krewShortMax = 50

// Every shortDescription (plugins/*.yaml and goreleaser's krews) fits krew's
// limit; this needs no snapshot, and (the package's other files carry the
// e2e tag) go test -short builds this file alone, without the sim harness.
func TestShortDescriptionsFitKrewSearch(t *testing.T) {
	root, err := filepath.Abs("../../..") // the package's directory is test/e2e/krew
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*(?:shortDescription|short_description):\s*(.+?)\s*$`)
	found := 0
	for _, f := range []string{"plugins/tt.yaml", "plugins/ate.yaml", ".goreleaser.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			found++
			if n := len([]rune(m[1])); n > krewShortMax {
				t.Errorf("%s: shortDescription %q is %d characters (krew shows %d)", f, m[1], n, krewShortMax)
			}
		}
	}
	if found != 4 {
		t.Errorf("found %d shortDescriptions, want 4 (two manifests, two krews)", found)
	}
}
