package atecmd

import (
	"context"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/clitest"
	"github.com/rollbook/rollbook/pkg/cli"
)

// ate retire ends the rollback option: on a terminal it asks first, as
// revert does, and an answer other than yes changes nothing (it does not
// even reach the cluster). --yes, --dry-run and input that is not a
// terminal (a script) go on without asking.
func TestRetireConfirmsOnATerminal(t *testing.T) {
	kc := clitest.UnreachableKubeconfig(t)
	run := func(in *strings.Reader, tty bool, args ...string) (string, int) {
		streams, _, out, errOut := genericiooptions.NewTestIOStreams()
		if tty {
			streams.In = clitest.Terminal{Reader: in}
		} else {
			streams.In = in
		}
		args = append(append([]string{"retire", "--backup-dir", t.TempDir()}, args...), "--kubeconfig", kc)
		code := cli.ExecuteContext(context.Background(), NewRootCommand(streams), args, errOut)
		return out.String() + errOut.String(), code
	}
	for _, answer := range []string{"n\n", "\n", "", "no\n", "yes please\n"} {
		out, code := run(strings.NewReader(answer), true)
		if code != cli.ExitBlocked || !strings.Contains(out, "[y/N]") || !strings.Contains(out, "Nothing retired") ||
			strings.Contains(out, "127.0.0.1") {
			t.Errorf("answer %q: exit %d, want 3 having asked and touched nothing\n%s", answer, code, out)
		}
	}
	for _, c := range []struct {
		answer string
		tty    bool
		args   []string
	}{{"y\n", true, nil}, {"YES\n", true, nil}, {"", true, []string{"--yes"}}, {"", false, nil}} {
		out, code := run(strings.NewReader(c.answer), c.tty, c.args...)
		if code == cli.ExitBlocked || !strings.Contains(out, "127.0.0.1") {
			t.Errorf("%q on a terminal %v %v: exit %d, want it to go on to the cluster\n%s", c.answer, c.tty, c.args, code, out)
		}
		if asked := strings.Contains(out, "[y/N]"); asked != (c.tty && len(c.args) == 0) {
			t.Errorf("%q on a terminal %v %v: asked %v\n%s", c.answer, c.tty, c.args, asked, out)
		}
	}
	if out, _ := run(strings.NewReader(""), true, "--dry-run"); strings.Contains(out, "[y/N]") {
		t.Errorf("--dry-run asked:\n%s", out)
	}
}
