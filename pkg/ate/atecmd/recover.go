package atecmd

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// recoverOptions are the flags of recover-node.
type recoverOptions struct {
	run  cli.RunFlags
	api  apiFlags
	cfg  node.RecoverConfig
	node string
}

func (o *recoverOptions) Complete(args []string) { o.node = args[0] }

func (o *recoverOptions) Validate() error {
	if err := o.run.Validate(); err != nil {
		return err
	}
	if err := validNodeName(o.node); err != nil {
		return err
	}
	if o.cfg.MaxConcurrentSuspends < 1 {
		return cli.UsageErrorf("--max-concurrent-suspends must be at least 1")
	}
	return nil
}

func (o *recoverOptions) Run(ctx context.Context, g *cli.Globals) error {
	if err := requireNode(ctx, g, o.node); err != nil {
		return err
	}
	if err := checkMovePermissions(ctx, g, o.run); err != nil {
		return err
	}
	return runOne(ctx, g, o.run, &o.api, func(ctx context.Context, s *apiSession) (runbook.Result, error) {
		undo, err := declareReplacing(ctx, s.Session, o.node)
		if err != nil {
			return runbook.Result{}, err
		}
		defer undo()
		return cli.Run(ctx, s.Session, node.RecoverRunbook(s.Client, s.client, s.Recorder, &o.cfg),
			[]runbook.Target{runbook.NodeTarget{Client: s.Client, Node: o.node}}, runbook.Options{}), nil
	}, "kubectl ate status",
		"fix what is shown above, then re-run: kubectl ate recover-node "+o.node)
}

// validNodeName refuses what cannot be a node name (shell metacharacters
// included) before anything is read.
func validNodeName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return cli.UsageErrorf("node name %q is not valid (%s); give a node from `kubectl get nodes`", name, errs[0])
	}
	return nil
}

// requireNode refuses an unknown node as bad input, before the lock is
// taken: nothing is changed. "" (no node given) passes.
func requireNode(ctx context.Context, g *cli.Globals, name string) error {
	if name == "" {
		return nil
	}
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return cli.UsageErrorf("node %q not found; give a node from `kubectl get nodes`", name)
	} else if err != nil {
		return err
	}
	return nil
}

func newRecoverNodeCommand(g *cli.Globals) *cobra.Command {
	o := &recoverOptions{}
	cmd := &cobra.Command{
		Use:   "recover-node NODE",
		Short: "Give a node whose workers were drained by mistake fresh workers (there is no undrain)",
		Long: `Recover a node drained by mistake. A DRAINING worker never takes an actor again, so the only way
back is new workers: suspend the actors still on the node's drained workers (as the roll's
suspend step does; a CRASHED one stops the run unless --revert-crashed), delete those workers'
pods, and wait until their Deployments' replacements are Ready and registered as fresh ACTIVE
workers. The node's version label is never touched; workers that are not draining and actors
merely paused on the node are left alone. Re-run the same command to resume.`,
		Example: `  kubectl ate recover-node kwok-node-1 --dry-run
  kubectl ate recover-node kwok-node-1`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cli.NodeCompletion(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), g)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.cfg.MaxConcurrentSuspends, "max-concurrent-suspends", 4, "actors suspended at once")
	fs.DurationVar(&o.cfg.SuspendInterval, "suspend-interval", 0, "pause between starting two suspends (pace the snapshot uploads)")
	fs.BoolVar(&o.cfg.RevertCrashed, "revert-crashed", false,
		"revert CRASHED actors to their last external snapshot instead of stopping (loses their work since then)")
	fs.DurationVar(&o.cfg.SuspendTimeout, "suspend-timeout", 30*time.Minute, "how long emptying the drained workers may take, "+
		"kept across re-runs; a run stops once the actors left cannot fit what is left at the suspend pace measured")
	fs.DurationVar(&o.cfg.ReplaceTimeout, "replace-timeout", 5*time.Minute, "how long the replacements may take to register")
	fs.DurationVar(&o.cfg.DeleteTimeout, "delete-timeout", 10*time.Minute, "how long the drained workers' pods may take to "+
		"go once deleted, kept across re-runs (a node whose kubelet is down stops the wait within seconds)")
	o.api.add(fs)
	o.run.AddFlags(fs, fleet.Namespace)
	return cmd
}

// declareReplacing says on the session's Lease that the run deletes node's
// drained worker pods so their pools replace them in place (not the roll's
// step-5 mistake of deleting pinned pods before a flip); the returned func
// takes it back.
func declareReplacing(ctx context.Context, s *cli.Session, name string) (func(), error) {
	lock := s.Lock()
	if lock == nil {
		return func() {}, nil
	}
	decl := s.RunID + "/" + name
	if err := lock.SetAnnotation(ctx, node.AnnRecoveringNode, &decl); err != nil {
		return nil, err
	}
	return func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := lock.SetAnnotation(cctx, node.AnnRecoveringNode, nil); err != nil {
			s.Progress.Printf("warning: could not take back the declaration on the lease that %s's pods are replaced in place: %v",
				name, err)
		}
	}, nil
}
