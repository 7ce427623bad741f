// Package tttest holds what the kubectl-tt e2e test packages share: run the
// command tree against the package's simulated cluster.
package tttest

import (
	"context"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

// Run runs kubectl tt with args against the package's simulated cluster
// and returns its output (stdout then stderr) and exit code.
func Run(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	c := simtest.Get(t)
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	code := cli.ExecuteContext(ctx, ttcmd.NewRootCommand(streams), append(args, "--kubeconfig", c.Kubeconfig), errOut)
	all := out.String() + errOut.String()
	t.Logf("kubectl tt %s → exit %d\n%s", strings.Join(args, " "), code, all)
	return all, code
}
