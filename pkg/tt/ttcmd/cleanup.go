package ttcmd

import (
	"context"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// newCleanupCommand is the shared cleanup with tt's records, plus the host
// caches through a helper pod per node when --host-caches asks.
func newCleanupCommand(g *cli.Globals) *cobra.Command {
	var hostCaches bool
	var image string
	spec := cli.CleanupSpec{Plugin: "tt", LockName: tt.LockName, DefaultLockNamespace: "kube-system",
		HelperNamespace: deploy.HelperNamespace, Secrets: []string{tt.BundleSecretName},
		NodeAnnotations: tt.CleanupAnnotations, HalfWay: cli.EachNode(tt.HalfWay), Finish: tt.FinishHint,
		KeepHelper: tt.OnlyRecordOfNeedsPerson}
	spec.ExtraFlags = func(cmd *cobra.Command) {
		cmd.Flags().BoolVar(&hostCaches, "host-caches", false,
			"also remove "+tt.HostCacheNote+" on every Tenstorrent node (a downgrade then rebuilds the module)")
		cmd.Flags().StringVar(&image, "helper-image", defaultHelperImage(), "image of the clean-cache helper pods (with --host-caches)")
	}
	spec.Extra = func(ctx context.Context, o *cli.CleanupOptions, cs kubernetes.Interface, nodes []corev1.Node) ([]cli.CleanupItem, error) {
		if !hostCaches {
			return nil, nil
		}
		if image == "" {
			return nil, cli.UsageErrorf("--host-caches runs a helper pod: %s", tt.NoHelperImage())
		}
		h := tt.HelperConfig{Image: image, Namespace: o.HelperNamespace, PriorityClass: deploy.HelperPriorityClass}
		var sel tt.Selection
		if err := applyAdminParams(ctx, cs, &h, &sel); err != nil {
			return nil, err
		}
		rec := &kube.EventWriter{Client: cs, Component: "kubectl-tt", Instance: "cleanup"}
		var items []cli.CleanupItem
		for _, n := range nodes {
			if n.Labels[tt.LabelPCIPresent] != "true" || n.Labels[h.NodeAccess.Key] != h.NodeAccess.Value {
				// No card, or a node the admin keeps helpers off.
				continue
			}
			items = append(items, cli.CleanupItem{Object: "node/" + n.Name, What: tt.HostCacheNote,
				Remove: func(ctx context.Context) error {
					detail, err := tt.CleanHostCache(ctx, cs, rec, h, n.Name)
					if err == nil {
						o.Printf("  %s: %s", n.Name, detail)
					}
					return err
				}})
		}
		return items, nil
	}
	return cli.NewCleanupCommand(g, spec)
}
