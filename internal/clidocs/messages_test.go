package clidocs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// A command as rollbook's messages give one: `kubectl tt|ate WORDS` on an
// indented line (an example) or after an opening bracket, a quote or
// "run", as a person copies it (prose such as "kubectl tt signs each
// module" is not).
var commandMention = regexp.MustCompile("(?m)(?:^\\s{2,}|[(`'\"]|\\b[Rr]un )kubectl (tt|ate)((?: [a-z][a-z-]*)*)")

// Every command a message, a help text or an example names exists in the
// plugin it names: rollbook's messages once sent people to "kubectl ate
// suspend actor" and "kubectl ate get actors", commands of the
// substrate's own CLI that this plugin does not have.
func TestMessagesNameCommandsThatExist(t *testing.T) {
	trees := map[string]*cobra.Command{}
	for _, r := range roots() {
		r.InitDefaultCompletionCmd()
		trees[strings.TrimPrefix(r.Name(), "kubectl-")] = r
		trees[r.Name()] = r
	}
	root := filepath.Join("..", "..")
	n := 0
	for _, dir := range []string{"pkg", "cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(node ast.Node) bool {
				lit, ok := node.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, m := range commandMention.FindAllStringSubmatch(s, -1) {
					n++
					tree := trees[m[1]]
					if tree == nil {
						t.Fatalf("no command tree for %q (roots are named %v)", m[1], trees)
					}
					words := strings.Fields(m[2])
					if len(words) == 0 {
						continue
					}
					if sub := child(tree, words[0]); sub == nil {
						rel, _ := filepath.Rel(root, path)
						t.Errorf("%s names \"kubectl %s %s\": kubectl %s has no command %q", rel, m[1], strings.Join(words, " "),
							m[1], words[0])
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 50 {
		t.Fatalf("found only %d command mentions: the scan is broken", n)
	}
}

// child is c's subcommand called name (or by an alias), nil if none.
func child(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name || s.HasAlias(name) {
			return s
		}
	}
	return nil
}
