package nodeagent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// clean-cache removes the module cache and a staged tt-smi, and nothing
// the node runs: the installed module and the host's tt-smi stay.
func TestCleanCacheRemovesOnlyCaches(t *testing.T) {
	root := t.TempDir()
	write := func(rel string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cached := write("var/cache/tt-kmd/6.1.0-18-amd64/2.7.0/tenstorrent.ko")
	staged := write("usr/local/bin/.tt-smi.new")
	keep := []string{write("lib/modules/6.1.0-18-amd64/updates/tenstorrent.ko"), write("usr/local/bin/tt-smi")}
	a := &nodeagent.Agent{Root: root, Log: testLog{t}}
	r := a.CleanCache(context.Background())
	if !r.Success || !r.Changed || len(r.Steps) != 1 || !strings.Contains(r.Steps[0].Detail, "/var/cache/tt-kmd (1 files") {
		t.Fatalf("clean-cache: %+v", r)
	}
	for _, p := range []string{cached, staged} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived: %v", p, err)
		}
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	b, err := nodeagent.EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeagent.ParseResult(b); err != nil {
		t.Fatalf("the CLI cannot read the result back: %v", err)
	}
	if r := a.CleanCache(context.Background()); !r.Success || r.Changed {
		t.Fatalf("a second clean-cache: %+v", r)
	}
}
