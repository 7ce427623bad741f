package atecmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
)

// apiFlags say how to reach the substrate control API.
type apiFlags struct {
	endpoint, caFile, tokenFile string
}

func (a *apiFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&a.endpoint, "ate-endpoint", "", "host:port of the control API (default: port-forward to svc/api in "+fleet.Namespace+")")
	fs.StringVar(&a.caFile, "ate-ca-file", "", "PEM CA bundle to verify the API (default: the live ClusterTrustBundles)")
	fs.StringVar(&a.tokenFile, "ate-token-file", "", "file holding a bearer token for the API (default: minted for SA ate-client by "+
		"TokenRequest)")
}

func (a *apiFlags) dial(ctx context.Context, g *cli.Globals) (*ateapi.Client, error) {
	cfg, err := g.Factory.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := ateapi.Dial(ctx, ateapi.DialOptions{Endpoint: a.endpoint, CAFile: a.caFile, TokenFile: a.tokenFile, RESTConfig: cfg,
		Unary: lockGated(g)})
	if err != nil {
		return nil, fmt.Errorf("connect to the Agent Substrate control API: %w", err)
	}
	return c, nil
}

func dynamicClient(g *cli.Globals) (dynamic.Interface, error) { return g.Factory.DynamicClient() }

// rollClients dials the control API (refusing one without a working
// DrainWorker) and bundles it with the session's clients for moving nodes.
func rollClients(ctx context.Context, g *cli.Globals, s *cli.Session, api *apiFlags, dryRun bool) (roll.Clients, func(), error) {
	dyn, err := dynamicClient(g)
	if err != nil {
		return roll.Clients{}, nil, err
	}
	client, err := api.dial(ctx, g)
	if err != nil {
		return roll.Clients{}, nil, err
	}
	closeAPI := func() { _ = client.Close() }
	if caps := client.Capabilities(); !caps.DrainImplemented {
		closeAPI()
		return roll.Clients{}, nil, cli.WithExitCode(cli.ExitBlocked, fmt.Errorf(
			"the control API does not implement DrainWorker (era %s): "+
				"this install predates versioned builds and needs a fresh install", caps.Era))
	}
	if !dryRun {
		// One node out of service at a time, said on the Lease for anyone watching.
		if err := s.SetMaxOutOfService(ctx, 1); err != nil {
			closeAPI()
			return roll.Clients{}, nil, err
		}
	}
	return roll.Clients{Client: s.Client, Dynamic: dyn, API: client, Recorder: s.Recorder}, closeAPI, nil
}

// lockGated holds every control-API call (a suspend, a drain: the
// substrate's mutations do not pass the Kubernetes clients' gate) until the
// run's lock says it may still act (lease.Gate); reflection passes.
func lockGated(g *cli.Globals) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
		opts ...grpc.CallOption) error {
		if !strings.HasPrefix(method, "/grpc.reflection.") {
			if err := g.Gate.Check(ctx); err != nil {
				return fmt.Errorf("%s not sent: %w", method, err)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
