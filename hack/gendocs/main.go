// gendocs writes runbooks/*.md from the step registries (make docs).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/tt"
)

func main() {
	dir := "runbooks"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	docs := tt.Docs()
	for name, md := range ate.Docs() {
		docs[name] = md
	}
	for name, md := range docs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", filepath.Join(dir, name))
	}
}
