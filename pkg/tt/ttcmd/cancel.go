package ttcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/cli"
)

type cancelOptions struct {
	g         *cli.Globals
	namespace string
	dry       bool
}

func newCancelCommand(g *cli.Globals) *cobra.Command {
	o := &cancelOptions{g: g}
	cmd := &cobra.Command{
		Use:   "cancel",
		Short: "Stop the in-cluster run: its Job is deleted and its pod stops between API calls, as on Ctrl-C",
		Long: `Delete the active in-cluster run's Job. Its pod gets SIGTERM and, as a terminal's run on Ctrl-C,
stops between API calls, marks any node it leaves cordoned with why (status shows it) and releases
the Lease. To stop after the node in flight instead, use "kubectl tt pause" (the Job then completes).
Re-run the same upgrade (here or --in-cluster) to continue.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	cmd.Flags().StringVar(&o.namespace, "runner-namespace", deploy.RunnerNamespace, "namespace of in-cluster runs' Jobs")
	cli.DryRunVar(cmd.Flags(), &o.dry, "client", "say which Job would be deleted and delete nothing")
	return cmd
}

// Run deletes every in-cluster Job still active.
func (o *cancelOptions) Run(ctx context.Context) error {
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	jobs, err := inClusterJobs(ctx, cs, o.namespace)
	if err != nil {
		return err
	}
	out := o.g.IOStreams.Out
	n := 0
	for i := range jobs {
		j := &jobs[i]
		if s := jobState(j); s != "active" && s != "pending" {
			continue
		}
		n++
		if o.dry {
			fmt.Fprintf(out, "(dry run) would delete job/%s in %s\n", j.Name, j.Namespace)
			continue
		}
		err := cs.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name,
			metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		fmt.Fprintf(out, "job/%s deleted: its run stops between API calls and releases the lock; kubectl tt status shows "+
			"where it stopped\n", j.Name)
	}
	if n == 0 {
		fmt.Fprintf(out, "no in-cluster run active in %s\n", o.namespace)
	}
	return nil
}
