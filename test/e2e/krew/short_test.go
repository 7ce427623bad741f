package krew

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/rollbook/rollbook/internal/simtest"
)

// krewShortMax is what `krew search` shows of a shortDescription; krew's
// index CI rejects longer ones.
const krewShortMax = 50

// Every shortDescription (plugins/*.yaml and goreleaser's krews) fits krew's
// limit; this needs no snapshot.
func TestShortDescriptionsFitKrewSearch(t *testing.T) {
	root, err := simtest.RepoRoot()
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
