//go:build e2e

// Package bare runs both plugins against a cluster that has neither
// Tenstorrent nodes nor Agent Substrate: each says so in a sentence, not in
// an artifact of the code (an empty table, a flag's name).
package bare

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 1}) }

// run executes `kubectl <plugin> args…` against the sim and returns its
// exit code, stdout and stderr.
func run(t *testing.T, plugin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	var root *cobra.Command
	if plugin == "tt" {
		root = ttcmd.NewRootCommand(streams)
	} else {
		root = atecmd.NewRootCommand(streams)
	}
	args = append(args, "--kubeconfig", simtest.Get(t).Kubeconfig)
	code := cli.Execute(root, args, &errOut)
	return code, out.String(), errOut.String()
}

func TestTTStatusWithoutTenstorrentNodesSaysWhatItLookedFor(t *testing.T) {
	code, out, errOut := run(t, "tt", "status")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "No Tenstorrent node") || !strings.Contains(out, "feature.node.kubernetes.io/pci-1200_1e52.present=true") {
		t.Errorf("status says:\n%s", out)
	}
	if strings.Contains(out, "NODE") {
		t.Errorf("an empty table:\n%s", out)
	}
	// Scripts get an empty list, not the sentence.
	if code, out, _ := run(t, "tt", "status", "-o", "name"); code != 0 || out != "" {
		t.Errorf("-o name: exit %d, %q", code, out)
	}
	if code, out, _ := run(t, "tt", "status", "-o", "jsonpath={.items}"); code != 0 || out != "[]" {
		t.Errorf("-o jsonpath: exit %d, %q", code, out)
	}
	// --any-node: every node is a Tenstorrent node now, and shows in the table.
	if code, out, _ := run(t, "tt", "status", "--any-node", "-o", "name"); code != 0 || !strings.HasPrefix(out, "node/") {
		t.Errorf("--any-node -o name: exit %d, %q", code, out)
	}
}

func TestATERollWithoutSubstrateSaysSo(t *testing.T) {
	for _, args := range [][]string{{"roll", "next-node"}, {"roll", "next-node", "--dry-run"}} {
		code, out, errOut := run(t, "ate", args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, "Agent Substrate is not installed on this cluster") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		if strings.Contains(errOut, "--lock-namespace") {
			t.Errorf("%v names a flag instead of the cause:\n%s", args, errOut)
		}
	}
}

// -n is refused where it would be ignored, before anything connects.
func TestNamespaceFlagRefusedWhereItMeansNothing(t *testing.T) {
	code, _, errOut := run(t, "tt", "status", "-n", "default")
	if code != cli.ExitUsage || !strings.Contains(errOut, "-n/--namespace means nothing") || !strings.Contains(errOut, "--helper-namespace") {
		t.Errorf("tt status -n: exit %d\n%s", code, errOut)
	}
	code, _, errOut = run(t, "ate", "pause", "-n", "default", "--dry-run")
	if code != cli.ExitUsage || !strings.Contains(errOut, "--lock-namespace") {
		t.Errorf("ate pause -n: exit %d\n%s", code, errOut)
	}
}
