package clidocs

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

// roots are both plugins' command trees, as the binaries build them.
func roots() []*cobra.Command {
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}
	return []*cobra.Command{ttcmd.NewRootCommand(streams), atecmd.NewRootCommand(streams)}
}

func visit(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, s := range c.Commands() {
		visit(s, f)
	}
}

// Every --dry-run takes kubectl's spellings: bare, =client (or =server
// where the server checks), =none and =false. A plain bool flag fails
// --dry-run=client with a strconv error.
func TestDryRunSpelledAsKubectl(t *testing.T) {
	n := 0
	for _, root := range roots() {
		visit(root, func(c *cobra.Command) {
			f := c.Flags().Lookup("dry-run")
			if f == nil {
				return
			}
			n++
			if f.NoOptDefVal == "" {
				t.Errorf("%s: --dry-run needs a value", c.CommandPath())
			}
			accepted := 0
			for _, mode := range []string{"client", "server"} {
				err := f.Value.Set(mode)
				if err == nil {
					accepted++
				} else if strings.Contains(err.Error(), "strconv") || !strings.Contains(err.Error(), "--dry-run") {
					t.Errorf("%s --dry-run=%s: %v (say which spellings it takes)", c.CommandPath(), mode, err)
				}
			}
			if accepted == 0 {
				t.Errorf("%s: --dry-run takes neither client nor server", c.CommandPath())
			}
			for _, off := range []string{"none", "false"} {
				if err := f.Value.Set(off); err != nil {
					t.Errorf("%s --dry-run=%s: %v", c.CommandPath(), off, err)
				} else if v := f.Value.String(); v != "none" && v != "false" {
					t.Errorf("%s --dry-run=%s left it %q", c.CommandPath(), off, v)
				}
			}
		})
	}
	if n < 5 {
		t.Fatalf("only %d commands with --dry-run: the walk is broken", n)
	}
}

// NODE arguments and -o values complete, as kubectl's do: every command
// whose usage takes a NODE has a completion for its arguments, every -o
// and --nodes a completion for its value.
func TestNodesAndOutputComplete(t *testing.T) {
	n := 0
	for _, root := range roots() {
		visit(root, func(c *cobra.Command) {
			if strings.Contains(c.Use, "NODE") && c.ValidArgsFunction == nil {
				t.Errorf("%s takes NODE but does not complete it", c.CommandPath())
			}
			for _, name := range []string{"output", "nodes"} {
				if c.Flags().Lookup(name) == nil {
					continue
				}
				n++
				complete, ok := c.GetFlagCompletionFunc(name)
				if !ok {
					t.Errorf("%s --%s does not complete", c.CommandPath(), name)
					continue
				}
				if name == "output" {
					if got, _ := complete(c, nil, ""); !slices.Contains(got, "json") {
						t.Errorf("%s -o completes %v, without json", c.CommandPath(), got)
					}
				}
			}
		})
	}
	if n < 10 {
		t.Fatalf("only %d -o and --nodes flags: the walk is broken", n)
	}
}

// A command's help shows its own flags, not the 20-odd global ones again:
// as kubectl, it points at "kubectl tt|ate options", which lists them
// (without -n, which no command reads and every command refuses).
func TestHelpHidesGlobalFlags(t *testing.T) {
	for _, root := range roots() {
		var b strings.Builder
		root.SetOut(&b)
		root.SetArgs([]string{"options"})
		if err := root.Execute(); err != nil {
			t.Fatalf("%s options: %v", root.CommandPath(), err)
		}
		if opts := b.String(); !strings.Contains(opts, "--kubeconfig") || !strings.Contains(opts, "--context") ||
			strings.Contains(opts, "--namespace") {
			t.Errorf("%s options lists:\n%s", root.CommandPath(), opts)
		}
		visit(root, func(c *cobra.Command) {
			if c == root || c.Hidden || !c.IsAvailableCommand() {
				return
			}
			var h strings.Builder
			c.SetOut(&h)
			if err := c.Usage(); err != nil {
				t.Fatal(err)
			}
			if u := h.String(); strings.Contains(u, "--kubeconfig") || strings.Contains(u, "--namespace") ||
				!strings.Contains(u, root.CommandPath()+" options") {
				t.Errorf("%s help repeats the global flags or does not point at options:\n%s", c.CommandPath(), u)
			}
		})
	}
}
