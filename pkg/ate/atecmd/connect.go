package atecmd

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/pkg/ate"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
)

// apiFlags say how to reach the substrate control API.
type apiFlags struct {
	endpoint, caFile, tokenFile string
}

func (a *apiFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&a.endpoint, "ate-endpoint", "", "host:port of the control API (default: port-forward to svc/api in "+ate.Namespace+")")
	fs.StringVar(&a.caFile, "ate-ca-file", "", "PEM CA bundle to verify the API (default: the live ClusterTrustBundles)")
	fs.StringVar(&a.tokenFile, "ate-token-file", "", "file holding a bearer token for the API (default: minted for SA ate-client by TokenRequest)")
}

func (a *apiFlags) dial(ctx context.Context, g *cli.Globals) (*ateapi.Client, error) {
	cfg, err := g.Factory.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := ateapi.Dial(ctx, ateapi.DialOptions{Endpoint: a.endpoint, CAFile: a.caFile, TokenFile: a.tokenFile, RESTConfig: cfg})
	if err != nil {
		return nil, fmt.Errorf("connect to the Agent Substrate control API: %w", err)
	}
	return c, nil
}

func dynamicClient(g *cli.Globals) (dynamic.Interface, error) { return g.Factory.DynamicClient() }
