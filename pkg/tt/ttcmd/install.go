package ttcmd

import (
	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/install/installcmd"
	"github.com/rollbook/rollbook/pkg/tt"
)

// installSpec: tt's install needs nothing from the cluster to render.
var installSpec = installcmd.Spec{Plugin: "tt", LockName: tt.LockName, LockNamespace: "kube-system"}

func newInstallCommands(g *cli.Globals) []*cobra.Command {
	return []*cobra.Command{installcmd.NewInstallCommand(g, installSpec), installcmd.NewUninstallCommand(g, installSpec)}
}
