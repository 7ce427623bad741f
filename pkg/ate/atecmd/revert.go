package atecmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// revertOptions are the flags and arguments of revert.
type revertOptions struct {
	g          *cli.Globals
	run        cli.RunFlags
	api        apiFlags
	atespace   string
	allCrashed bool
	yes        bool
	timeout    time.Duration

	actor string
}

func newRevertCommand(g *cli.Globals) *cobra.Command {
	o := &revertOptions{g: g}
	cmd := &cobra.Command{
		Use:   "revert ACTOR -a ATESPACE | --all-crashed",
		Short: "Return CRASHED actors to SUSPENDED at their last external snapshot (loses work since then)",
		Long: `A CRASHED actor (its worker pod went away while it was awake) refuses resume and suspend.
RevertActor discards the crashed run and returns the actor to SUSPENDED at its last external
snapshot, from which it resumes on demand. Everything the actor did since that snapshot is
lost. The command says which snapshot each actor goes back to and asks for confirmation on
its input; --yes confirms without asking (required when the input is not a terminal).
It runs the revert runbook (runbooks/ate-revert.md) holding the roll's lock; an actor that is
no longer CRASHED counts as done, so a re-run resumes.`,
		Example: `  kubectl ate revert counter-7 -a team-a
  kubectl ate revert --all-crashed --dry-run
  kubectl ate revert --all-crashed --yes -o json
  kubectl ate revert --all-crashed -a team-a`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.api.add(cmd.Flags())
	o.run.AddFlags(cmd.Flags(), fleet.Namespace)
	cmd.Flags().StringVarP(&o.atespace, "atespace", "a", "", "the actor's atespace (with --all-crashed: only this atespace)")
	cmd.Flags().BoolVar(&o.allCrashed, "all-crashed", false, "revert every CRASHED actor")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "confirm without asking: accept losing each actor's work since its last snapshot")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long each actor may take to reach SUSPENDED")
	return cmd
}

// Complete reads the ACTOR argument.
func (o *revertOptions) Complete(args []string) {
	if len(args) == 1 {
		o.actor = args[0]
	}
}

// Validate rejects bad input before any API call.
func (o *revertOptions) Validate() error {
	if err := o.run.Validate(); err != nil {
		return err
	}
	switch {
	case o.allCrashed && o.actor != "":
		return cli.UsageErrorf("give an ACTOR or --all-crashed, not both")
	case !o.allCrashed && o.actor == "":
		return cli.UsageErrorf("give an ACTOR (with -a ATESPACE) or --all-crashed")
	case o.actor != "" && o.atespace == "":
		return cli.UsageErrorf("-a ATESPACE is required with an ACTOR")
	case o.timeout <= 0:
		return cli.UsageErrorf("--timeout must be positive")
	}
	if !o.yes && !o.run.DryRun && !cli.InputIsTerminal(o.g.IOStreams.In) {
		return cli.UsageErrorf("refusing to revert without confirmation: the input is not a terminal, so nobody can answer the " +
			"prompt. Reverting loses each actor's work since its last external snapshot; pass --yes to accept that")
	}
	return nil
}

// Run lists the actors, asks for confirmation, and reverts them in one
// session.
func (o *revertOptions) Run(ctx context.Context) error {
	return runOne(ctx, o.g, o.run, &o.api, func(ctx context.Context, s *apiSession) (runbook.Result, error) {
		actors, err := o.actors(ctx, s)
		if err != nil {
			return runbook.Result{}, err
		}
		if err := o.confirm(actors); err != nil {
			return runbook.Result{}, err
		}
		var targets []runbook.Target
		for _, a := range actors {
			targets = append(targets, roll.ActorTarget{Actor: a.Ref()})
		}
		return cli.Run(ctx, s.Session, roll.RevertRunbook(s.client, s.Recorder, o.timeout), targets,
			runbook.Options{KeepGoing: true}), nil
	}, "kubectl ate status", "fix what is shown above, then re-run the same command")
}

// actors are the actors to revert: every CRASHED one (of -a's atespace),
// or the one named.
func (o *revertOptions) actors(ctx context.Context, s *apiSession) ([]ateapi.Actor, error) {
	if !o.allCrashed {
		a, err := s.client.GetActor(ctx, o.atespace, o.actor)
		return []ateapi.Actor{a}, err
	}
	actors, err := roll.CrashedActors(ctx, s.client, o.atespace)
	if err == nil && len(actors) == 0 {
		s.Progress.Printf("No CRASHED actor: nothing to revert.")
	}
	return actors, err
}

// confirm says what reverting the CRASHED actors loses and, unless --yes
// or --dry-run, asks.
func (o *revertOptions) confirm(actors []ateapi.Actor) error {
	var crashed []ateapi.Actor
	for _, a := range actors {
		if a.State == ateapi.ActorCrashed {
			crashed = append(crashed, a)
		}
	}
	if len(crashed) == 0 || o.run.DryRun {
		return nil
	}
	out := o.g.IOStreams.Out
	if o.run.Output != "" {
		out = o.g.IOStreams.ErrOut
	}
	fmt.Fprintf(out, "Reverting %d CRASHED actor(s) to SUSPENDED at their last external snapshot.\n", len(crashed))
	fmt.Fprintln(out, "Everything each actor did since that snapshot is LOST; it resumes from the snapshot on demand.")
	for _, a := range crashed {
		fmt.Fprintf(out, "  %s: %s\n", a.Ref(), roll.RevertLoss(a))
	}
	if o.yes {
		return nil
	}
	fmt.Fprintf(out, "Revert %d actor(s) and lose their work since the snapshot? [y/N]: ", len(crashed))
	line, err := bufio.NewReader(o.g.IOStreams.In).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if answer := strings.ToLower(strings.TrimSpace(line)); answer != "y" && answer != "yes" {
		fmt.Fprintln(out, "Nothing reverted.")
		return cli.WithExitCode(cli.ExitBlocked, errors.New("not confirmed"))
	}
	return nil
}
