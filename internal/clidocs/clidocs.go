// Package clidocs renders the CLI reference (docs/cli/*.md) from the command
// trees of both plugins, so the reference cannot drift from the flags.
package clidocs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

// Dir is where the reference lives, relative to the repository root.
const Dir = "docs/cli"

// Pages returns every page of the reference by file name: one per visible
// command of `kubectl tt` and `kubectl ate`, and an index (README.md).
func Pages() (map[string]string, error) {
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}
	pages := map[string]string{}
	var index strings.Builder
	index.WriteString("# CLI reference\n\nGenerated from the command trees by `make docs`; a test fails when it is stale.\n")
	for _, root := range []*cobra.Command{ttcmd.NewRootCommand(streams), atecmd.NewRootCommand(streams)} {
		// Execute adds the completion command; the reference documents it too.
		root.InitDefaultCompletionCmd()
		// A dated footer would make every regeneration a diff.
		root.DisableAutoGenTag = true
		machineFree(root)
		fmt.Fprintf(&index, "\n## %s\n\n", root.CommandPath())
		if err := walk(root, pages, &index); err != nil {
			return nil, err
		}
	}
	pages["README.md"] = index.String()
	return pages, nil
}

// machineFree replaces defaults read from this machine ($HOME, the
// environment) with what they mean, so the pages are the same everywhere.
func machineFree(c *cobra.Command) {
	home, _ := os.UserHomeDir()
	fix := func(f *pflag.Flag) {
		switch {
		case f.Name == "helper-image":
			f.DefValue = "" // $ROLLBOOK_HELPER_IMAGE or the release's image; the usage says so
		case len(home) > 1 && strings.HasPrefix(f.DefValue, home):
			f.DefValue = "$HOME" + strings.TrimPrefix(f.DefValue, home)
		}
	}
	c.Flags().VisitAll(fix)
	c.PersistentFlags().VisitAll(fix)
	for _, s := range c.Commands() {
		machineFree(s)
	}
}

func walk(c *cobra.Command, pages map[string]string, index *strings.Builder) error {
	if !c.IsAvailableCommand() && c.HasParent() || c.IsAdditionalHelpTopicCommand() {
		return nil
	}
	name := fileName(c)
	var b bytes.Buffer
	if err := doc.GenMarkdownCustom(c, &b, func(s string) string { return s }); err != nil {
		return err
	}
	pages[name] = b.String()
	fmt.Fprintf(index, "- [%s](%s) — %s\n", c.CommandPath(), name, c.Short)
	subs := c.Commands()
	sort.Slice(subs, func(i, j int) bool { return subs[i].Name() < subs[j].Name() })
	for _, s := range subs {
		if err := walk(s, pages, index); err != nil {
			return err
		}
	}
	return nil
}

// fileName is cobra/doc's own link target for c ("kubectl_tt_status.md").
func fileName(c *cobra.Command) string {
	return path.Base(strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md")
}
