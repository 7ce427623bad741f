// gendocs writes runbooks/*.md from the step registries and docs/cli/*.md
// from the command trees (make docs).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/clidocs"
	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/install"
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
	write(dir, docs)

	pages, err := clidocs.Pages()
	if err != nil {
		fail(err)
	}
	// The reference is rewritten whole: a removed command loses its page.
	if err := os.RemoveAll(clidocs.Dir); err != nil {
		fail(err)
	}
	if err := os.MkdirAll(clidocs.Dir, 0o755); err != nil {
		fail(err)
	}
	write(clidocs.Dir, pages)

	policy, err := install.ShippedAdmission()
	if err != nil {
		fail(err)
	}
	write("deploy", map[string]string{deploy.HelperPolicyFile: string(policy)})
}

func write(dir string, files map[string]string) {
	for name, md := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(md), 0o644); err != nil {
			fail(err)
		}
		fmt.Println("wrote", filepath.Join(dir, name))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
