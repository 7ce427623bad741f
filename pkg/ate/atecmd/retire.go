package atecmd

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/ui"
)

// retireResult is what retire prints with -o json|yaml.
type retireResult struct {
	Checks  []ate.Check `json:"checks"`
	Failed  int         `json:"failed"`
	DryRun  bool        `json:"dryRun"`
	Backups []string    `json:"backups,omitempty"`
	Deleted []string    `json:"deleted,omitempty"`
	// Plan is what a dry run would do.
	Plan []string `json:"plan,omitempty"`
}

func newRetireCommand(g *cli.Globals) *cobra.Command {
	var (
		run       cli.RunFlags
		api       apiFlags
		backupDir string
		backupCM  bool
	)
	cmd := &cobra.Command{
		Use:   "retire",
		Short: "Delete the old pools and the OLD atelet DaemonSet after the roll (ends the rollback option)",
		Long: `Reclaim the rollback reserve once the new version has soaked. Refuses unless no node is at
OLD, no old-pool pod is Running (Pending is expected) and no actor is bound to an old-pool
worker; each guard is shown with its evidence. Before anything is deleted, each old WorkerPool
is saved as YAML in --backup-dir (and with --backup-configmap as a ConfigMap in its namespace),
stripped of server-set fields so that kubectl apply -f recreates it. Then the old pools (their
Deployments and pods go with them) and the OLD atelet DaemonSet are deleted.`,
		Example: `  kubectl ate retire --dry-run
  kubectl ate retire --backup-dir ./backups --backup-configmap`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := run.Validate(); err != nil {
				return err
			}
			if st, err := os.Stat(backupDir); err != nil || !st.IsDir() {
				return cli.UsageErrorf("--backup-dir %q is not a directory", backupDir)
			}
			s, ctx, err := cli.StartSession(cmd.Context(), g, run, "ate", ate.LockName)
			if err != nil {
				return err
			}
			defer func() { _ = s.Fail(nil) }() // releases the lock
			dyn, err := dynamicClient(g)
			if err != nil {
				return err
			}
			client, err := api.dial(ctx, g)
			if err != nil {
				return err
			}
			defer client.Close()
			f, err := ate.ObserveRetire(ctx, s.Client, dyn, client)
			if err != nil {
				return err
			}
			info := g.IOStreams.Out
			if run.Output != "" {
				info = g.IOStreams.ErrOut
			}
			res := retireResult{Checks: f.Checks(), DryRun: run.DryRun}
			res.Failed = ate.Failed(res.Checks)
			printChecks(info, res.Checks)
			finish := func(err error) error {
				if run.Output != "" {
					if perr := ui.PrintObject(g.IOStreams.Out, run.Output, res); perr != nil {
						return perr
					}
				}
				return err
			}
			if f.Nothing() {
				fmt.Fprintf(info, "Nothing to retire: one atelet DaemonSet (%s).\n", f.Cluster.Old)
				return finish(nil)
			}
			if res.Failed > 0 {
				return finish(cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%d guard(s) failed: the old pools stay (they are the "+
					"rollback reserve)", res.Failed)))
			}
			if run.DryRun {
				for _, p := range f.OldPools {
					res.Plan = append(res.Plan, "save workerpool/"+p.Key()+" to "+ate.BackupFile(backupDir, p))
					if backupCM {
						res.Plan = append(res.Plan, "save workerpool/"+p.Key()+" to configmap/"+p.Namespace+"/"+ate.BackupConfigMapName(p))
					}
				}
				for _, p := range f.OldPools {
					res.Plan = append(res.Plan, "delete workerpool/"+p.Key())
				}
				if f.OldAtelet != "" {
					res.Plan = append(res.Plan, "delete daemonset/"+ate.Namespace+"/"+f.OldAtelet)
				}
				fmt.Fprintln(info, "Dry run; would:")
				for _, l := range res.Plan {
					fmt.Fprintln(info, "  "+l)
				}
				return finish(nil)
			}
			// Every backup first: nothing is deleted unless all are saved.
			for _, p := range f.OldPools {
				where, err := ate.WriteBackup(ctx, s.Client, s.Recorder, p, backupDir, backupCM)
				res.Backups = append(res.Backups, where...)
				if err != nil {
					return finish(err)
				}
			}
			for _, p := range f.OldPools {
				why := fmt.Sprintf("retired %s (pinned to %s); no node, pod or actor used it", p.Key(), p.Pin)
				if err := ate.DeletePool(ctx, dyn, s.Recorder, p, why); err != nil {
					return finish(err)
				}
				res.Deleted = append(res.Deleted, "workerpool/"+p.Key())
			}
			if f.OldAtelet != "" {
				ds, err := s.Client.AppsV1().DaemonSets(ate.Namespace).Get(ctx, f.OldAtelet, metav1.GetOptions{})
				if err == nil {
					err = ate.DeleteAtelet(ctx, s.Client, s.Recorder, ds,
						fmt.Sprintf("retired the %s atelet DaemonSet: no node carries %s", f.Cluster.Old, f.Cluster.Old))
				}
				if err != nil && !apierrors.IsNotFound(err) {
					return finish(err)
				}
				res.Deleted = append(res.Deleted, "daemonset/"+ate.Namespace+"/"+f.OldAtelet)
			}
			st := ui.NewStyle(info)
			fmt.Fprintf(info, "%s retired %d pool(s) and the %s atelet; backups: %v\n", st.OK("✓"), len(f.OldPools), f.Cluster.Old,
				res.Backups)
			fmt.Fprintf(info, "To recreate a pool: kubectl apply -f %s\nNext: %s\n",
				ate.BackupFile(backupDir, ate.Pool{Namespace: "NAMESPACE", Name: "NAME"}), st.Bold("kubectl ate status"))
			return finish(nil)
		},
	}
	api.add(cmd.Flags())
	run.AddFlags(cmd.Flags(), ate.Namespace)
	cmd.Flags().StringVar(&backupDir, "backup-dir", ".", "directory to save each old WorkerPool's YAML in")
	cmd.Flags().BoolVar(&backupCM, "backup-configmap", false, "also save each old WorkerPool as a ConfigMap in its namespace")
	return cmd
}
