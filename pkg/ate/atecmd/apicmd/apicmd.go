// Package apicmd is `kubectl ate api`: the substrate control API called
// directly, on grpcurl's library, through rollbook's connection (port-forward,
// ClusterTrustBundle CA, TokenRequest token). The calling logic lives in
// pkg/apicall.
package apicmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/apicall"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/ui"
)

// connFlags say how to reach the API; the token is never a flag value, so
// it cannot end up in argv or shell history.
type connFlags struct {
	endpoint, caFile, tokenFile string
}

func (f *connFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoint, "ate-endpoint", "", "host:port of the control API (default: port-forward to svc/api in "+fleet.Namespace+")")
	fs.StringVar(&f.caFile, "ate-ca-file", "", "PEM CA bundle to verify the API (default: the live ClusterTrustBundles)")
	fs.StringVar(&f.tokenFile, "ate-token-file", "",
		"file holding a bearer token for the API (default: minted for SA ate-client by TokenRequest)")
}

// session is one connection plus its reflection.
type session struct {
	client *ateapi.Client
	api    *apicall.API
}

func (f *connFlags) open(ctx context.Context, g *cli.Globals) (*session, error) {
	cfg, err := g.Factory.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := ateapi.Dial(ctx, ateapi.DialOptions{Endpoint: f.endpoint, CAFile: f.caFile, TokenFile: f.tokenFile, RESTConfig: cfg})
	if err != nil {
		return nil, fmt.Errorf("connect to the Agent Substrate control API: %w", err)
	}
	return &session{client: c, api: apicall.New(ctx, c.Conn())}, nil
}

func (s *session) close() {
	s.api.Close()
	_ = s.client.Close()
}

// explain turns an error into the one printed: scrubbed of any token, with
// the exit code its kind deserves.
func (s *session) explain(err error) error {
	if err == nil {
		return nil
	}
	msg := s.client.Scrub(err.Error())
	var nf *apicall.NotFoundError
	var re *apicall.RequestError
	if errors.As(err, &nf) || errors.As(err, &re) {
		return cli.WithExitCode(cli.ExitUsage, errors.New(msg))
	}
	return cli.WithExitCode(cli.ExitFailed, errors.New(msg))
}

// NewCommand returns `kubectl ate api`.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Call the Agent Substrate control API directly (list, describe, call)",
		Long: `Speaks the control API generically, from the server's own reflection, the way grpcurl
does — through rollbook's connection: a port-forward to svc/api in ` + fleet.Namespace + `, TLS verified
against the live ClusterTrustBundles, and a short-lived token of ServiceAccount ate-client
that is never printed. Methods that only read run as they are: those the server's descriptor
marks idempotency_level = NO_SIDE_EFFECTS, and the substrate's known reading methods (ListWorkers,
GetWorker, ListActors, GetActor, ListWorkerActorAssignments). A name decides nothing: any other
method may change the substrate, so it needs --yes and takes the roll's Lease.`,
	}
	cmd.AddCommand(newListCommand(g), newDescribeCommand(g), newCallCommand(g))
	return cmd
}

func newListCommand(g *cli.Globals) *cobra.Command {
	var (
		conn   connFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "list [SERVICE]",
		Short: "List the API's methods and whether each only reads",
		Example: `  kubectl ate api list
  kubectl ate api list ateapi.Control -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ui.ValidateOutput(output, "json", "yaml"); err != nil {
				return cli.UsageErrorf("%v", err)
			}
			s, err := conn.open(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer s.close()
			service := ""
			if len(args) == 1 {
				service = args[0]
			}
			methods, err := s.api.Methods(service)
			if err != nil {
				return s.explain(err)
			}
			if output != "" {
				return ui.PrintObject(g.IOStreams.Out, output, methods)
			}
			w := tabwriter.NewWriter(g.IOStreams.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "METHOD\tKIND\tREQUEST\tRESPONSE")
			for _, m := range methods {
				kind := "mutating (--yes)"
				if m.ReadOnly {
					kind = "read-only"
				}
				if m.Streaming != "" {
					kind += ", " + m.Streaming + " stream"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", m.FullName(), kind, m.Request, m.Response)
			}
			return w.Flush()
		},
	}
	conn.add(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json|yaml")
	return cmd
}

func newDescribeCommand(g *cli.Globals) *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "describe SYMBOL",
		Short: "Show a service, method or message as proto source, with a JSON request template",
		Example: `  kubectl ate api describe ateapi.Control
  kubectl ate api describe ListWorkers`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := conn.open(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer s.close()
			text, err := s.api.Describe(args[0])
			if err != nil {
				return s.explain(err)
			}
			_, err = fmt.Fprint(g.IOStreams.Out, text)
			return err
		},
	}
	conn.add(cmd.Flags())
	return cmd
}

func newCallCommand(g *cli.Globals) *cobra.Command {
	var (
		conn      connFlags
		data      string
		yes       bool
		dryRun    bool
		stealLock bool
		lockNS    string
	)
	cmd := &cobra.Command{
		Use:   "call METHOD [-d JSON]",
		Short: "Call one method with a JSON request and print the response as JSON",
		Long: `METHOD is a bare name (ListWorkers) or SERVICE/METHOD. The request is JSON in the method's
input message (kubectl ate api describe METHOD shows a template); -d @FILE reads it from a
file and -d @- from the input. A method not known to only read (see kubectl ate api list) may
change the substrate: it needs --yes, and it holds the roll's Lease (` + fleet.LockName + `) while it runs,
so it never races a roll.`,
		Example: `  kubectl ate api call ListWorkers
  kubectl ate api call GetActor -d '{"actor":{"atespace":"team-a","name":"counter-7"}}'
  kubectl ate api call SuspendActor -d '{"actor":{"atespace":"team-a","name":"counter-7"}}' --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			method := args[0]
			body, err := readData(data, g)
			if err != nil {
				return err
			}
			if body != "" && !json.Valid([]byte(body)) {
				return cli.UsageErrorf("-d is not valid JSON: give the request as a JSON object, e.g. -d '{\"name\":\"x\"}'")
			}
			ctx := cmd.Context()
			s, err := conn.open(ctx, g)
			if err != nil {
				return err
			}
			defer s.close()
			// Whether the method reads is the server's descriptor's word
			// (or the known list), so it is asked first; asking changes nothing.
			m, err := s.api.Resolve(method)
			if err != nil {
				return s.explain(err)
			}
			if !m.ReadOnly && !yes && !dryRun {
				return cli.UsageErrorf("%s is not marked read-only (idempotency_level NO_SIDE_EFFECTS, or a known reading method), "+
					"so it may change the substrate: re-run with --yes to call it (or --dry-run to see what would be sent)", m.FullName())
			}
			if m.ReadOnly {
				return s.explain(s.api.Call(ctx, m, body, g.IOStreams.Out))
			}
			// A mutation: hold the roll's Lease and record it like any step.
			run := cli.RunFlags{DryRun: dryRun, Output: "json", StealLock: stealLock, LockNamespace: lockNS}
			sess, ctx, err := cli.StartSession(ctx, g, run, "ate", fleet.LockName)
			if err != nil {
				return err
			}
			if dryRun {
				sess.Progress.Printf("would call %s with %s", m.FullName(), orEmpty(body))
				return sess.Fail(nil)
			}
			err = s.api.Call(ctx, m, body, g.IOStreams.Out)
			svc := corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: fleet.Namespace, Name: ateapi.DefaultService}
			if err != nil {
				err = s.explain(err)
				sess.Recorder.Record(ctx, svc, true, "APICallFailed", fmt.Sprintf("%s: %v", m.FullName(), err))
				return sess.Fail(err)
			}
			sess.Recorder.Record(ctx, svc, false, "APICalled", fmt.Sprintf("called %s (run %s)", m.FullName(), sess.RunID))
			return sess.Fail(nil)
		},
	}
	conn.add(cmd.Flags())
	cmd.Flags().StringVarP(&data, "data", "d", "", "request as JSON; @FILE reads a file, @- the input (default: an empty request)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "confirm a method that changes the substrate")
	cli.DryRunVar(cmd.Flags(), &dryRun, "client", "print the method and request a mutating call would send, and send nothing")
	cmd.Flags().BoolVar(&stealLock, "steal-lock", false, "take over the lock from a run that stopped renewing it (never from a live one)")
	cmd.Flags().StringVar(&lockNS, "lock-namespace", fleet.Namespace, "namespace of the Lease that keeps two runs from fighting")
	return cmd
}

func orEmpty(body string) string {
	if strings.TrimSpace(body) == "" {
		return "an empty request"
	}
	return body
}
