package atecmd

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/install/installcmd"
)

// installSpec: ate's install makes the ate-operator Role in every
// namespace that holds a WorkerPool, read from the cluster.
var installSpec = installcmd.Spec{Plugin: "ate", LockName: fleet.LockName, LockNamespace: fleet.Namespace,
	Discover: func(ctx context.Context, g *cli.Globals, o *install.Options) error {
		dyn, err := g.Factory.DynamicClient()
		if err != nil {
			return err
		}
		l, err := dyn.Resource(fleet.WorkerPoolGVR).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			return cli.UsageErrorf("the cluster serves no WorkerPools (%s): Agent Substrate is not installed; install it first",
				fleet.WorkerPoolGVR.GroupResource())
		}
		if err != nil {
			return fmt.Errorf("listing WorkerPools to find their namespaces: %w", err)
		}
		seen := map[string]bool{}
		for _, p := range l.Items {
			if !seen[p.GetNamespace()] {
				seen[p.GetNamespace()] = true
				o.WorkerNamespaces = append(o.WorkerNamespaces, p.GetNamespace())
			}
		}
		sort.Strings(o.WorkerNamespaces)
		return nil
	}}

func newInstallCommands(g *cli.Globals) []*cobra.Command {
	return []*cobra.Command{installcmd.NewInstallCommand(g, installSpec), installcmd.NewUninstallCommand(g, installSpec)}
}
