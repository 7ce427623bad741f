package ttcmd

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

type logsOptions struct {
	g         *cli.Globals
	node      string
	namespace string
	inCluster bool
	runnerNS  string
	follow    bool
}

func newLogsCommand(g *cli.Globals) *cobra.Command {
	o := &logsOptions{g: g}
	cmd := &cobra.Command{
		Use:   "logs NODE | --in-cluster",
		Short: "What the last helper on a node reported: its result, and its log while the pod exists",
		Long: `Print what the last rollbook helper on NODE said. A failed helper is kept, so its
container log and termination message are shown; a successful one is deleted, and its
measured result stays recorded on the node (kmd, firmware, probe), which is shown instead.
With --in-cluster, print (with -f, follow) the newest in-cluster run's output instead.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.inCluster != (len(args) == 0) {
				return cli.UsageErrorf("requires a NODE argument, or --in-cluster for the in-cluster run's log")
			}
			if o.follow && !o.inCluster {
				return cli.UsageErrorf("-f follows the in-cluster run's log (--in-cluster); a helper's log is printed whole")
			}
			if o.inCluster {
				cs, err := o.g.Factory.KubernetesClientSet()
				if err != nil {
					return err
				}
				return printInClusterLogs(cmd.Context(), cs, o.runnerNS, o.follow, o.g.IOStreams.Out)
			}
			o.node = args[0]
			return o.Run(cmd.Context())
		},
		ValidArgsFunction: cli.NodeCompletion(g),
	}
	cmd.Flags().StringVar(&o.namespace, "helper-namespace", deploy.HelperNamespace, "namespace of the helper pods")
	cmd.Flags().BoolVar(&o.inCluster, "in-cluster", false, "the newest in-cluster run's log (upgrade … --in-cluster)")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "with --in-cluster, keep printing as the run goes")
	cmd.Flags().StringVar(&o.runnerNS, "runner-namespace", deploy.RunnerNamespace, "namespace of in-cluster runs' Jobs")
	return cmd
}

// Run prints the newest helper pod's output, then the results recorded on the node.
func (o *logsOptions) Run(ctx context.Context) error {
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	out := o.g.IOStreams.Out
	n, err := cs.CoreV1().Nodes().Get(ctx, o.node, metav1.GetOptions{})
	if err != nil {
		return cli.UsageErrorf("node %q: %v", o.node, err)
	}
	pods, err := cs.CoreV1().Pods(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{kube.LabelNode: o.node}.String()})
	if err != nil {
		return err
	}
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[i].CreationTimestamp.After(pods.Items[j].CreationTimestamp.Time)
	})
	if len(pods.Items) > 0 {
		printHelper(ctx, o.g, out, &pods.Items[0])
	} else {
		fmt.Fprintf(out, "no helper pod on %s in %s (successful helpers are deleted)\n", o.node, o.namespace)
	}
	for _, key := range []string{tt.AnnKMDResult, tt.AnnFirmwareResult, tt.AnnProbe} {
		if v, ok := n.Annotations[key]; ok {
			fmt.Fprintf(out, "\nrecorded on node/%s as %s:\n%s\n", o.node, key, v)
		}
	}
	return nil
}

func printHelper(ctx context.Context, g *cli.Globals, out io.Writer, p *corev1.Pod) {
	fmt.Fprintf(out, "helper pod %s/%s (%s, created %s): %s\n", p.Namespace, p.Name, p.Labels[kube.LabelHelper],
		p.CreationTimestamp.UTC().Format("2006-01-02 15:04:05"), p.Status.Phase)
	if msg, code, ok := kube.TerminationMessage(p); ok {
		fmt.Fprintf(out, "exit code %d; result:\n%s\n", code, strings.TrimSpace(msg))
	}
	if why := kube.HelperFailureReason(p); why != "" && p.Status.Phase != corev1.PodSucceeded {
		fmt.Fprintf(out, "why: %s\n", why)
	}
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return
	}
	tail := int64(200)
	b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
	if err != nil {
		fmt.Fprintf(out, "(its container log is not available: %v)\n", err)
		return
	}
	fmt.Fprintf(out, "log (last %d lines):\n%s", tail, b)
}
