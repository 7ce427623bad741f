package fakesubstrate

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
)

// DefaultAudience is the token audience the real API server checks.
const DefaultAudience = "api.ate-system.svc"

// Options configure a fake server.
type Options struct {
	// Era selects the schema and behaviour profile; default EraC.
	Era Era
	// Addr is the listen address; it must be a 127.0.0.1 address.
	// Default "127.0.0.1:0" (read the chosen port from Server.Addr).
	Addr string
	// Certificate is the serving certificate (see NewPKI). Required: the
	// fake, like the real server, only speaks TLS (1.3).
	Certificate *tls.Certificate
	// TokenReviewer authenticates bearer tokens; nil disables authentication.
	TokenReviewer TokenReviewer
	// Audience the token must be valid for; default DefaultAudience.
	Audience string
	// Authorize, when set, may refuse a principal a method (PermissionDenied).
	Authorize func(principal, fullMethod string) error
	// PageSize is the List page size when a request asks for 0; default 2.
	PageSize int
	// EmptyPages makes every other List page empty but carry a next token,
	// which the real server is allowed to do.
	EmptyPages bool
	// Rand, when set, places resumed actors on a random fitting worker
	// instead of the first by name.
	Rand *rand.Rand
	// Now is the clock; default time.Now.
	Now func() time.Time
	// TransitionTime, when set, makes SuspendActor and ResumeActor
	// asynchronous: the actor is SUSPENDING or RESUMING for this long.
	TransitionTime time.Duration
	// SyncSuspend makes a SuspendActor call return only once the actor is
	// SUSPENDED (after TransitionTime), as upstream's does.
	SyncSuspend bool
	// SoftLists makes List RPCs behave as the real ones may: pages of at
	// most SoftPageSize items (default 5) whatever the client asks, and an
	// item that changed after the list began (or within SoftWindow before
	// a page, when set) is left out of it.
	SoftLists    bool
	SoftPageSize int
	SoftWindow   time.Duration
	// OnLost is told of every actor that loses its state (CRASHED). It is
	// called with the server's lock held and must not call back into it.
	OnLost func(actor ActorRef, why string)
	// OnChange is told after an asynchronous transition finished.
	OnChange func()
	// EncodeCache keeps each listed worker's and actor's encoding until the
	// next change of any of them: a real server's generated code encodes
	// 50,000 actors in milliseconds, this fake's dynamic messages take
	// seconds, which a benchmark of the client must not measure.
	EncodeCache bool
}

// Server is a running fake ateapi.Control server.
type Server struct {
	era    Era
	opts   Options
	schema *schema
	grpc   *grpc.Server
	lis    net.Listener
	faults *faults
	rand   *rand.Rand
	done   chan struct{}
	tls    *tls.Config
	addr   string     // fixed at Start: Roll listens on it again
	rollMu sync.Mutex // held by Roll and Stop: grpc, lis and done change in Roll

	mu      sync.Mutex
	workers map[string]*Worker
	actors  map[string]*Actor
	bound   map[string][]*Actor // worker → bound actors; nil when stale (see actorsOn)
	// the names in order, nil when the set changed (see sortedWorkers)
	workerOrder []*Worker
	actorOrder  []*Actor
	// hidden are the atespaces each principal may not read (SetHiddenAtespaces).
	hidden map[string]map[string]bool
	// refused are the methods each principal may not call (SetRefusedMethods).
	refused    map[string]map[string]bool
	ateletDown map[string]bool
	atelets    map[string][]string // node → versions of its Ready atelets, for the nodes the sim reports
	calls      map[string]int
	seq        uint64         // bumped on every change of a worker or actor
	encoded    map[any][]byte // with EncodeCache: list items' encodings at encodedSeq
	encodedSeq uint64
}

// Start listens on a loopback address and serves the chosen era until Stop.
func Start(opts Options) (*Server, error) {
	if opts.Era == "" {
		opts.Era = EraC
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Audience == "" {
		opts.Audience = DefaultAudience
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 2
	}
	if opts.SoftPageSize <= 0 {
		opts.SoftPageSize = 5
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Certificate == nil {
		return nil, errors.New("fakesubstrate: a serving certificate is required (see NewPKI)")
	}
	if err := checkLoopback(opts.Addr); err != nil {
		return nil, err
	}
	sch, err := loadSchema(opts.Era)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("fakesubstrate: listen: %w", err)
	}
	s := &Server{
		era: opts.Era, opts: opts, schema: sch, faults: newFaults(), rand: opts.Rand,
		workers: map[string]*Worker{}, actors: map[string]*Actor{},
		ateletDown: map[string]bool{}, calls: map[string]int{},
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{*opts.Certificate}, MinVersion: tls.VersionTLS13}
	s.tls, s.addr = tlsCfg, lis.Addr().String()
	s.serve(lis)
	return s, nil
}

// serve starts a gRPC server of the current era on lis.
func (s *Server) serve(lis net.Listener) {
	g := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(s.tls)),
		grpc.ChainUnaryInterceptor(s.authUnary, s.countAndFault, rejectUnknownFields),
		grpc.ChainStreamInterceptor(s.authStream),
	)
	g.RegisterService(s.serviceDesc(), s)
	ropts := reflection.ServerOptions{Services: g, DescriptorResolver: s.schema.files}
	reflectionv1.RegisterServerReflectionServer(g, reflection.NewServerV1(ropts))
	reflectionv1alpha.RegisterServerReflectionServer(g, reflection.NewServer(ropts))
	done := make(chan struct{})
	s.grpc, s.lis, s.done = g, lis, done
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
}

// Roll replaces the API server by one of another era at the same address,
// as `ate-setup deploy apiserver` does (runbook step 6, or its rollback):
// every connection is closed, nothing listens for down, then the new era
// serves the same workers and actors (the state lives in the store, not in
// the API server).
func (s *Server) Roll(era Era, down time.Duration) error {
	sch, err := loadSchema(era)
	if err != nil {
		return err
	}
	s.rollMu.Lock()
	defer s.rollMu.Unlock()
	addr := s.addr
	s.grpc.Stop()
	<-s.done
	time.Sleep(down)
	s.mu.Lock()
	s.era, s.schema = era, sch
	s.encoded = nil // encodings of the old era's shapes
	s.mu.Unlock()
	var lis net.Listener
	for attempt := 0; ; attempt++ { // the port was ours a moment ago; a lingering socket may hold it briefly
		if lis, err = net.Listen("tcp", addr); err == nil || attempt == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("fakesubstrate: listen again on %s: %w", addr, err)
	}
	s.serve(lis)
	return nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("fakesubstrate: bad listen address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return fmt.Errorf("fakesubstrate: listen address %q is not a 127.0.0.0/8 address", addr)
	}
	return nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// Era is the era being served.
func (s *Server) Era() Era {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.era
}

// Stop closes the listener and every connection at once.
func (s *Server) Stop() {
	s.rollMu.Lock()
	defer s.rollMu.Unlock()
	s.grpc.Stop()
	<-s.done
}

// Calls reports how many times a method (short name, e.g. "DrainWorker")
// reached the server, including refused calls.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *Server) now() time.Time { return s.opts.Now() }
