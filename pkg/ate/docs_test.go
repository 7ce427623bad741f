package ate

import (
	"os"
	"path/filepath"
	"testing"
)

// The checked-in runbook pages must match the code; `make docs` regenerates them.
func TestRunbookDocsUpToDate(t *testing.T) {
	for name, want := range Docs() {
		got, err := os.ReadFile(filepath.Join("..", "..", "runbooks", name))
		if err != nil {
			t.Fatalf("%s: %v (run `make docs`)", name, err)
		}
		if string(got) != want {
			t.Errorf("runbooks/%s is stale; run `make docs` and commit the result", name)
		}
	}
}
