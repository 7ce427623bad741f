package ate

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layers of package ate (doc.go) each import only those below them,
// and only the node runbook decides where a node stands: its facts are
// private to it, and no code outside node and the read model (fleet) reads
// the marks a move leaves on a node.
func TestLayers(t *testing.T) {
	const mod = "github.com/rollbook/rollbook/pkg/ate/"
	below := map[string][]string{"pullpod": nil, "fleet": nil, "node": {"fleet"}, "roll": {"fleet", "node", "pullpod"},
		"campaign": {"fleet", "node", "roll"}}
	for layer, allowed := range below {
		files, err := filepath.Glob(filepath.Join(layer, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no files (%v)", layer, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range ast.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if other, ok := strings.CutPrefix(path, mod); ok && !slices.Contains(allowed, strings.Split(other, "/")[0]) {
					t.Errorf("%s imports %s: %s may import only %v", f, path, layer, allowed)
				}
			}
		}
	}
	marks := regexp.MustCompile(`\b(AnnMovingTo|AnnVerifyPending|MovingTo|VerifyPending)\b`)
	root := filepath.Join("..", "..")
	n := 0
	for _, dir := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			n++
			rel, _ := filepath.Rel(root, path)
			if strings.HasPrefix(rel, filepath.Join("pkg", "ate", "node")) || strings.HasPrefix(rel, filepath.Join("pkg", "ate", "fleet")) {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range marks.FindAllString(string(b), -1) {
				t.Errorf("%s reads %s: only the node runbook decides where a node stands (ask node.Locator)", rel, m)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 50 {
		t.Fatalf("read only %d files: the walk is broken", n)
	}
}
