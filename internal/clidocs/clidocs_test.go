package clidocs

import (
	"os"
	"path/filepath"
	"testing"
)

// docs/cli must match the command trees; `make docs` regenerates it.
func TestCLIReferenceUpToDate(t *testing.T) {
	pages, err := Pages()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", Dir)
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v (run `make docs`)", name, err)
			continue
		}
		if string(got) != want {
			t.Errorf("%s/%s is stale; run `make docs` and commit the result", Dir, name)
		}
	}
	// A page of a command that no longer exists is stale too.
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := pages[f.Name()]; !ok {
			t.Errorf("%s/%s documents no command; run `make docs`", Dir, f.Name())
		}
	}
	for _, must := range []string{"kubectl_tt_status.md", "kubectl_ate_roll_next-node.md", "kubectl_tt_upgrade_kmd.md"} {
		if _, ok := pages[must]; !ok {
			t.Errorf("no page %s", must)
		}
	}
	if _, ok := pages["kubectl_tt_node-agent.md"]; ok {
		t.Error("the hidden node-agent command has a page")
	}
}
