package atecmd

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// retireOptions are the flags of retire.
type retireOptions struct {
	g      *cli.Globals
	run    cli.RunFlags
	api    apiFlags
	backup roll.BackupOptions
	yes    bool
}

func newRetireCommand(g *cli.Globals) *cobra.Command {
	o := &retireOptions{g: g}
	cmd := &cobra.Command{
		Use:   "retire",
		Short: "Delete the old pools and the OLD atelet DaemonSet after the roll (ends the rollback option)",
		Long: `Reclaim the rollback reserve once the new version has soaked. Refused (exit 3, nothing
changed) unless no node is at OLD, no old-pool pod is Running (Pending is expected), no actor is
bound to an old-pool worker and every old pool has a clone serving on NEW. Steps (runbooks/ate-retire.md):
save each old WorkerPool as YAML in --backup-dir (and with --backup-configmap as a ConfigMap in
its namespace), stripped of server-set fields so that kubectl apply -f recreates it; delete the
old pools (their Deployments and pods go with them); delete the OLD atelet DaemonSet.
Re-run to resume after a stop. On a terminal it asks first; --yes answers for you.`,
		Example: `  kubectl ate retire --dry-run
  kubectl ate retire --backup-dir ./backups --backup-configmap --yes
  kubectl ate retire -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			if err := o.confirm(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.api.add(cmd.Flags())
	o.run.AddFlags(cmd.Flags(), fleet.Namespace)
	cmd.Flags().StringVar(&o.backup.Dir, "backup-dir", ".", "directory to save each old WorkerPool's YAML in")
	cmd.Flags().BoolVar(&o.backup.ConfigMap, "backup-configmap", false, "also save each old WorkerPool as a ConfigMap in its namespace")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "retire without asking (a terminal is asked; a script is not)")
	return cmd
}

// confirm asks on a terminal before anything is read or changed: retire
// ends the rollback option, as kubeadm reset asks before it resets.
func (o *retireOptions) confirm() error {
	if o.yes || o.run.DryRun {
		return nil
	}
	out := o.g.IOStreams.Out
	if o.run.Output != "" {
		out = o.g.IOStreams.ErrOut
	}
	return cli.ConfirmOnTerminal(o.g.IOStreams.In, out,
		"Retire deletes every old WorkerPool (saved first to "+o.backup.Dir+") and the OLD atelet DaemonSet: "+
			"afterwards the roll can no longer go back to OLD.",
		"Retire the old version?", "Nothing retired.")
}

// Validate rejects bad flags before any API call.
func (o *retireOptions) Validate() error {
	if err := o.run.Validate(); err != nil {
		return err
	}
	if st, err := os.Stat(o.backup.Dir); err != nil || !st.IsDir() {
		return cli.UsageErrorf("--backup-dir %q is not a directory: create it, or name an existing one", o.backup.Dir)
	}
	return nil
}

// Run retires the old version in one session.
func (o *retireOptions) Run(ctx context.Context) error {
	return runOne(ctx, o.g, o.run, &o.api, func(ctx context.Context, s *apiSession) (runbook.Result, error) {
		return cli.Run(ctx, s.Session, roll.RetireRunbook(s.Client, s.dyn, s.client, s.Recorder, o.backup), rollScope(),
			runbook.Options{}), nil
	}, "kubectl ate status   (to recreate a retired pool: kubectl apply -f "+
		roll.BackupFile(o.backup.Dir, fleet.Pool{Namespace: "NAMESPACE", Name: "NAME"})+")",
		"fix what is shown above, then re-run: kubectl ate retire")
}

// rollScope is the target of the runbooks that act on the roll as a whole.
func rollScope() []runbook.Target { return []runbook.Target{runbook.ScopeTarget{Scope: "roll"}} }
