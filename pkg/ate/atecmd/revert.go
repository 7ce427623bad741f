package atecmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/ui"
)

// inputIsTerminal reports whether the command's input stream is a TTY a
// person can answer the prompt on; tests replace it.
var inputIsTerminal = func(in io.Reader) bool {
	f, ok := in.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newRevertCommand(g *cli.Globals) *cobra.Command {
	var (
		api        apiFlags
		atespace   string
		allCrashed bool
		yes        bool
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "revert ACTOR -a ATESPACE | --all-crashed",
		Short: "Return CRASHED actors to SUSPENDED at their last external snapshot (loses work since then)",
		Long: `A CRASHED actor (its worker pod went away while it was awake) refuses resume and suspend.
RevertActor discards the crashed run and returns the actor to SUSPENDED at its last external
snapshot, from which it resumes on demand. Everything the actor did since that snapshot is
lost. The command says which snapshot each actor goes back to and asks for confirmation on
its input; --yes confirms without asking (required when the input is not a terminal).`,
		Example: `  kubectl ate revert counter-7 -a team-a
  kubectl ate revert --all-crashed --yes
  kubectl ate revert --all-crashed -a team-a`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case allCrashed && len(args) == 1:
				return cli.UsageErrorf("give an ACTOR or --all-crashed, not both")
			case !allCrashed && len(args) == 0:
				return cli.UsageErrorf("give an ACTOR (with -a ATESPACE) or --all-crashed")
			case len(args) == 1 && atespace == "":
				return cli.UsageErrorf("-a ATESPACE is required with an ACTOR")
			}
			if !yes && !inputIsTerminal(g.IOStreams.In) {
				return cli.UsageErrorf("refusing to revert without confirmation: the input is not a terminal, so nobody can answer the " +
					"prompt. Reverting loses each actor's work since its last external snapshot; pass --yes to accept that")
			}
			ctx := cmd.Context()
			client, err := api.dial(ctx, g)
			if err != nil {
				return err
			}
			defer client.Close()
			if !client.Capabilities().Has("RevertActor") {
				return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("the control API does not serve RevertActor (era %s): a crashed "+
					"actor can only be deleted on this install", client.Capabilities().Era))
			}
			var actors []ateapi.Actor
			if allCrashed {
				inv, err := client.Inventory(ctx)
				if err != nil {
					return err
				}
				for _, a := range inv.Actors {
					if a.State == ateapi.ActorCrashed && (atespace == "" || a.Atespace == atespace) {
						actors = append(actors, a)
					}
				}
				sort.Slice(actors, func(i, j int) bool { return actors[i].Ref().String() < actors[j].Ref().String() })
				if len(actors) == 0 {
					fmt.Fprintln(g.IOStreams.Out, "No CRASHED actor: nothing to revert.")
					return nil
				}
			} else {
				a, err := client.GetActor(ctx, atespace, args[0])
				if err != nil {
					return err
				}
				switch a.State {
				case ateapi.ActorCrashed:
				case ateapi.ActorSuspended:
					fmt.Fprintf(g.IOStreams.Out, "%s/%s is already SUSPENDED: nothing to revert.\n", a.Atespace, a.Name)
					return nil
				default:
					return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%s/%s is %s, not CRASHED: revert only recovers a crashed actor "+
						"(to stop a live one, suspend it; that keeps its work)", a.Atespace, a.Name, a.State))
				}
				actors = []ateapi.Actor{a}
			}
			out := g.IOStreams.Out
			fmt.Fprintf(out, "Reverting %d CRASHED actor(s) to SUSPENDED at their last external snapshot.\n", len(actors))
			fmt.Fprintln(out, "Everything each actor did since that snapshot is LOST; it resumes from the snapshot on demand.")
			for _, a := range actors {
				snap := a.ExternalSnapshotURI
				if snap == "" {
					snap = "no external snapshot of its own: back to the golden snapshot it started from"
				}
				crash := ""
				if a.CrashMessage != "" {
					crash = " — crashed: " + a.CrashMessage
				}
				fmt.Fprintf(out, "  %s/%s → %s%s\n", a.Atespace, a.Name, snap, crash)
			}
			if !yes {
				ok, err := confirm(g.IOStreams.In, out, fmt.Sprintf("Revert %d actor(s) and lose their work since the snapshot? [y/N]: ", len(actors)))
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintln(out, "Nothing reverted.")
					return cli.WithExitCode(cli.ExitBlocked, errors.New("not confirmed"))
				}
			}
			st := ui.NewStyle(out)
			var failed []string
			for _, a := range actors {
				got, err := revertOne(ctx, client, a, timeout)
				if err != nil {
					failed = append(failed, a.Atespace+"/"+a.Name)
					fmt.Fprintf(out, "%s %s/%s: %v\n", st.Bad("✗"), a.Atespace, a.Name, err)
					continue
				}
				fmt.Fprintf(out, "%s %s/%s is %s\n", st.OK("✓"), a.Atespace, a.Name, got.State)
			}
			if len(failed) > 0 {
				return cli.WithExitCode(cli.ExitFailed, fmt.Errorf("%d actor(s) not reverted: %s; re-run to "+
					"retry", len(failed), strings.Join(failed, ", ")))
			}
			return nil
		},
	}
	api.add(cmd.Flags())
	cmd.Flags().StringVarP(&atespace, "atespace", "a", "", "the actor's atespace (with --all-crashed: only this atespace)")
	cmd.Flags().BoolVar(&allCrashed, "all-crashed", false, "revert every CRASHED actor")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "confirm without asking: accept losing each actor's work since its last snapshot")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long each actor may take to reach SUSPENDED")
	return cmd
}

func confirm(in io.Reader, out io.Writer, prompt string) (bool, error) {
	fmt.Fprint(out, prompt)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes", nil
}

// revertOne calls RevertActor and polls until the actor is SUSPENDED (it
// passes through REVERTING). A FailedPrecondition because it already left
// CRASHED is re-read, not reported.
func revertOne(ctx context.Context, client *ateapi.Client, a ateapi.Actor, limit time.Duration) (ateapi.Actor, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	got, err := client.RevertActor(ctx, a.Atespace, a.Name)
	var ae *ateapi.Error
	if err != nil && !(errors.As(err, &ae) && (ae.ActorState == ateapi.ActorSuspended || ae.ActorState == ateapi.ActorReverting)) {
		return got, err
	}
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		if got.State == ateapi.ActorSuspended {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, fmt.Errorf("still %s after %s", got.State, limit)
		case <-time.After(delay):
		}
		if got, err = client.GetActor(ctx, a.Atespace, a.Name); err != nil {
			return got, err
		}
	}
}
