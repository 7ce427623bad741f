package substrate

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/monitor"
)

// Files Start writes into the sim's directory (design §6).
const (
	EndpointFile = "ate-endpoint" // host:port of the fake API server
	CAFile       = "ate-ca.pem"   // the CA its certificate chains to
)

// Substrate is a running simulated substrate.
type Substrate struct {
	Server *fakesubstrate.Server
	PKI    *fakesubstrate.PKI

	cfg     Config
	dyn     dynamic.Interface
	changed *changes
}

// Start serves the fake control API on 127.0.0.1, publishes its CA as a
// ClusterTrustBundle, installs ate-system's API objects (Deployment and
// Service "api", SA ate-client, the kwok ClusterPortForward) and the
// WorkerPool CRD, then writes <Dir>/ate-endpoint and <Dir>/ate-ca.pem. The
// controllers run in Run.
func Start(ctx context.Context, cfg Config) (*Substrate, error) {
	cfg.Options = cfg.Options.withDefaults()
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	dyn, err := dynamic.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	pki, err := fakesubstrate.NewPKI(ServerName)
	if err != nil {
		return nil, err
	}
	changed := newChanges()
	srv, err := fakesubstrate.Start(fakesubstrate.Options{
		Era: cfg.Era, Certificate: &pki.Certificate, PageSize: cfg.PageSize,
		TokenReviewer: TokenReviewer{Client: cfg.Client},
		// Random placement, as the real scheduler: resumes land on old
		// and new pools alike.
		Rand:           rand.New(rand.NewSource(time.Now().UnixNano())),
		TransitionTime: cfg.TransitionTime, SyncSuspend: cfg.SyncSuspend, SoftLists: cfg.SoftLists,
		OnChange: changed.fire,
		// Every lost actor is a safety violation, whoever caused it.
		OnLost: func(a fakesubstrate.ActorRef, why string) {
			cfg.Monitor.Report(monitor.RuleActorLost, "actor/"+a.Atespace+"/"+a.Name, why)
			cfg.Logf("substrate: actor %s/%s LOST: %s", a.Atespace, a.Name, why)
		},
	})
	if err != nil {
		return nil, err
	}
	s := &Substrate{Server: srv, PKI: pki, cfg: cfg, dyn: dyn, changed: changed}
	if err := s.install(ctx); err != nil {
		srv.Stop()
		return nil, err
	}
	cfg.Logf("substrate: ateapi.Control era %s at %s (svc/api in %s; %s, %s)", cfg.Era, srv.Addr(), Namespace, EndpointFile, CAFile)
	return s, nil
}

func (s *Substrate) install(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := installAPI(ctx, s.dyn, s.Server.Addr(), s.cfg.Era); err != nil {
		return fmt.Errorf("install ate-system: %w", err)
	}
	version, err := publishTrustBundle(ctx, s.cfg.Client, s.PKI.CAPEM)
	if err != nil {
		return fmt.Errorf("publish CA: %w", err)
	}
	s.cfg.Logf("substrate: CA published as ClusterTrustBundle (certificates.k8s.io/%s)", version)
	if err := InstallCRD(ctx, s.cfg.RESTConfig, s.cfg.OldCRD); err != nil {
		return err
	}
	if s.cfg.Dir == "" {
		return nil
	}
	if err := writeFileAtomic(filepath.Join(s.cfg.Dir, CAFile), s.PKI.CAPEM); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.cfg.Dir, EndpointFile), []byte(s.Server.Addr()+"\n"))
}

// Run runs the pool controller, the worker syncer and (if configured) the
// traffic simulator until ctx ends, then stops the server.
func (s *Substrate) Run(ctx context.Context) error {
	defer s.Server.Stop()
	w := newWatches(s.cfg.Client, s.dyn)
	pc := newPoolController(s.dyn, w)
	ws := newWorkerSyncer(s.Server, w, s.cfg.EvictionWindow, s.cfg.RegisterDelay, s.changed, s.cfg.Logf)
	ws.capacity, ws.capacityDelay = s.cfg.WorkerCapacity, s.cfg.CapacityDelay
	ws.ateomExit = s.cfg.AteomExit
	// The sim's kubelet finishes a deleted pod once its containers exit:
	// an ateom with awake actors holds its window, an atelet drains.
	cluster.HoldExits(ws.holdExit)
	cluster.HoldExits(ateletHold(s.cfg.AteletHandoff))
	nw := newNodeWatch(s.cfg.Client, s.Server, s.changed, s.cfg.Logf)
	nw.dir = s.cfg.Dir
	if err := w.start(ctx); err != nil {
		return err
	}
	go pc.run(ctx)
	go ws.run(ctx)
	if err := nw.start(ctx); err != nil {
		return err
	}
	if err := watchAtelets(ctx, s.cfg.Client, s.Server); err != nil {
		return err
	}
	if err := s.watchAPIRolls(ctx); err != nil {
		return err
	}
	if t := s.cfg.Traffic; t != nil {
		go runTraffic(ctx, s.Server, *t, s.changed)
	}
	<-ctx.Done()
	return nil
}

// WaitFor blocks until cond holds on the fake's workers and actors,
// re-checking whenever the syncer or traffic changes them.
func (s *Substrate) WaitFor(ctx context.Context, what string, cond func([]fakesubstrate.Worker, []fakesubstrate.Actor) bool) error {
	for {
		next := s.changed.next()
		if cond(s.Server.Workers(), s.Server.Actors()) {
			return nil
		}
		select {
		case <-next:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// Changed tells waiters that the test or scenario changed the fake directly.
func (s *Substrate) Changed() { s.changed.fire() }

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
