package ttcmd

import (
	"context"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/clitest"
	"github.com/rollbook/rollbook/pkg/cli"
)

// An upgrade of the whole fleet (no NODE, --nodes or --selector) asks on a
// terminal first, as kubeadm upgrade apply does; an answer but yes exits
// 3 without reaching the cluster. A chosen set of nodes, --yes, --dry-run
// and a script (input not a terminal) are not asked.
func TestFleetWideUpgradeConfirmsOnATerminal(t *testing.T) {
	kc := clitest.UnreachableKubeconfig(t)
	run := func(in string, tty bool, args ...string) (string, int) {
		streams, _, out, errOut := genericiooptions.NewTestIOStreams()
		streams.In = strings.NewReader(in)
		if tty {
			streams.In = clitest.Terminal{Reader: strings.NewReader(in)}
		}
		args = append(args, "--kubeconfig", kc, "--helper-image", "example.com/node-agent@sha256:"+strings.Repeat("b", 64))
		code := cli.ExecuteContext(context.Background(), NewRootCommand(streams), args, errOut)
		return out.String() + errOut.String(), code
	}
	for _, up := range [][]string{{"upgrade", "kmd", "--version", "2.8.0"}, {"upgrade", "smi", "--version", "3.0.12"},
		{"upgrade", "firmware", "--version", "18.7.0", "--bundle-sha256", strings.Repeat("a", 64)}} {
		for _, answer := range []string{"n\n", "", "nope\n"} {
			out, code := run(answer, true, up...)
			if code != cli.ExitBlocked || !strings.Contains(out, "[y/N]") || !strings.Contains(out, "Nothing upgraded") ||
				strings.Contains(out, "127.0.0.1") {
				t.Errorf("%v, answer %q: exit %d, want 3 having asked and touched nothing\n%s", up, answer, code, out)
			}
		}
		for _, c := range []struct {
			answer string
			tty    bool
			extra  []string
			asked  bool
		}{{"y\n", true, nil, true}, {"", true, []string{"--yes"}, false}, {"", true, []string{"--nodes", "a"}, false},
			{"", true, []string{"a"}, false}, {"", true, []string{"-l", "pool=x"}, false}, {"", false, nil, false}} {
			out, code := run(c.answer, c.tty, append(append([]string{}, up...), c.extra...)...)
			if code == cli.ExitUsage || !strings.Contains(out, "127.0.0.1") {
				t.Errorf("%v %v (%q, terminal %v): exit %d, want it to go on to the cluster\n%s", up, c.extra, c.answer, c.tty, code, out)
			}
			if asked := strings.Contains(out, "[y/N]"); asked != c.asked {
				t.Errorf("%v %v (%q, terminal %v): asked %v, want %v\n%s", up, c.extra, c.answer, c.tty, asked, c.asked, out)
			}
		}
		if out, _ := run("", true, append(append([]string{}, up...), "--dry-run")...); strings.Contains(out, "[y/N]") {
			t.Errorf("%v --dry-run asked:\n%s", up, out)
		}
	}
}
