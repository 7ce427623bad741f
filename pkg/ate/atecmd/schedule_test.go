package atecmd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/clitest"
	"github.com/rollbook/rollbook/pkg/cli"
)

// The node moves judge --window and --stop-at before the cluster: a bad
// one exits 2, a closed window exits 0 paused with the command to re-run,
// neither reaching the (unreachable) API server.
func TestNodeMovesJudgeTheScheduleBeforeTheCluster(t *testing.T) {
	kc := clitest.UnreachableKubeconfig(t)
	run := func(args ...string) (string, int) {
		streams, _, out, errOut := genericiooptions.NewTestIOStreams()
		code := cli.ExecuteContext(context.Background(), NewRootCommand(streams), append(args, "--kubeconfig", kc), errOut)
		return out.String() + errOut.String(), code
	}
	from := time.Now().UTC().Add(2 * time.Hour)
	closed := fmt.Sprintf("%s-%s Etc/UTC", from.Format("15:04"), from.Add(time.Hour).Format("15:04"))
	for _, verb := range []string{"roll", "rollback"} {
		for _, bad := range [][]string{{"--window", "Sat 01:00-05:00 Mars/Base"}, {"--stop-at", "2026-01-01"}} {
			out, code := run(append([]string{verb, "next-node", "--all"}, bad...)...)
			if code != cli.ExitUsage || strings.Contains(out, "127.0.0.1") {
				t.Errorf("%s next-node %v: exit %d, want 2 before the cluster\n%s", verb, bad, code, out)
			}
		}
		out, code := run(verb, "next-node", "--all", "--window", closed)
		if code != cli.ExitOK || strings.Contains(out, "127.0.0.1") ||
			!strings.Contains(out, "re-run then: kubectl ate "+verb+" next-node --all --window '"+closed+"'") {
			t.Errorf("%s next-node outside the window: exit %d, want 0 paused naming the command\n%s", verb, code, out)
		}
	}
}
