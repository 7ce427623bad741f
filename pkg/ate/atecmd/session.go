package atecmd

import (
	"context"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// apiSession is a session with what the ate runbooks act through: the
// dynamic client and a connection to the control API (close it).
type apiSession struct {
	*cli.Session
	dyn    dynamic.Interface
	client *ateapi.Client
}

// startAPISession starts a session holding the roll's lock and connects.
func startAPISession(ctx context.Context, g *cli.Globals, run cli.RunFlags, api *apiFlags) (*apiSession, context.Context, error) {
	s, ctx, err := cli.StartSession(ctx, g, run, "ate", fleet.LockName)
	if err != nil {
		return nil, ctx, err
	}
	dyn, err := dynamicClient(g)
	if err != nil {
		return nil, ctx, s.Fail(err)
	}
	client, err := api.dial(ctx, g)
	if err != nil {
		return nil, ctx, s.Fail(err)
	}
	return &apiSession{Session: s, dyn: dyn, client: client}, ctx, nil
}

// runOne is a command that runs one runbook in one session holding the
// roll's lock, with the control API dialed: rb runs it (cli.Run) in the
// session; an error it returns ends the session failed. done is what to run
// after a run that finished; stopped, when set, what to do after one that
// did not.
func runOne(ctx context.Context, g *cli.Globals, run cli.RunFlags, api *apiFlags,
	rb func(ctx context.Context, s *apiSession) (runbook.Result, error), done, stopped string) error {
	s, ctx, err := startAPISession(ctx, g, run, api)
	if err != nil {
		return err
	}
	defer s.client.Close()
	res, err := rb(ctx, s)
	if err != nil {
		return s.Fail(err)
	}
	next := done
	if stopped != "" && res.Outcome != runbook.OutcomeDone && res.Outcome != runbook.OutcomePlanned {
		next = stopped
	}
	return s.Finish(res, next)
}

// readers are what status and preflight read through; api is nil when the
// control API was not asked (--no-api) or could not be dialed (dialErr).
type readers struct {
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	md      metadata.Interface
	api     campaign.APIReader
	dialErr error
	close   func()
}

func connectReaders(ctx context.Context, g *cli.Globals, a *apiFlags, noAPI bool) (*readers, error) {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamicClient(g)
	if err != nil {
		return nil, err
	}
	md, err := g.MetadataClient()
	if err != nil {
		return nil, err
	}
	r := &readers{cs: cs, dyn: dyn, md: md, close: func() {}}
	if noAPI {
		return r, nil
	}
	client, err := a.dial(ctx, g)
	if r.dialErr = err; err == nil {
		r.api, r.close = client, func() { _ = client.Close() }
	}
	return r, nil
}

// asked is the view status reads: nil when the API is not to be asked.
func (r *readers) asked() func(context.Context) campaign.APIView {
	if r.api == nil && r.dialErr == nil {
		return nil
	}
	return r.view
}

// view asks the control API again (a redraw lists workers and actors anew).
func (r *readers) view(ctx context.Context) campaign.APIView {
	return campaign.ReadAPI(ctx, r.api, r.dialErr)
}
