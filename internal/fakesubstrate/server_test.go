package fakesubstrate

import (
	"context"
	"crypto/tls"
	"slices"
	"testing"

	"github.com/jhump/protoreflect/grpcreflect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rollbook/rollbook/pkg/atestate"
	"github.com/rollbook/rollbook/pkg/protopath"
)

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

func start(t *testing.T, opts Options) (*Server, *grpc.ClientConn) {
	t.Helper()
	pki, err := NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	opts.Certificate = &pki.Certificate
	opts.TokenReviewer = StaticTokens{"t": {Principal: "p", Audiences: []string{DefaultAudience}}}
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///"+s.Addr(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.CAPool, ServerName: DefaultServerName})),
		grpc.WithPerRPCCredentials(bearer("t")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, conn
}

// call invokes method with a request message of reqSchema's type (which may
// be another era's, to send fields this server does not know).
func call(t *testing.T, s *Server, conn *grpc.ClientConn, method string, req protoreflect.Message) (protoreflect.Message, error) {
	t.Helper()
	md := s.schema.service.Methods().ByName(protoreflect.Name(method))
	resp := dynamicpb.NewMessage(md.Output())
	err := conn.Invoke(context.Background(), "/ateapi.Control/"+method, req.Interface(), resp)
	return resp, err
}

func request(t *testing.T, era Era, method string) *dynamicpb.Message {
	t.Helper()
	sch, err := loadSchema(era)
	if err != nil {
		t.Fatal(err)
	}
	return dynamicpb.NewMessage(sch.service.Methods().ByName(protoreflect.Name(method)).Input())
}

func TestReflectionServesTheEra(t *testing.T) {
	for _, era := range Eras() {
		s, conn := start(t, Options{Era: era})
		rc := grpcreflect.NewClientAuto(context.Background(), conn)
		names, err := rc.ListServices()
		if err != nil || !slices.Contains(names, "ateapi.Control") {
			t.Fatalf("%s: services %v, %v", era, names, err)
		}
		sd, err := rc.ResolveService("ateapi.Control")
		if err != nil {
			t.Fatal(err)
		}
		hasDrain := sd.FindMethodByName("DrainWorker") != nil
		if hasDrain != (era != EraB2) {
			t.Errorf("%s: DrainWorker listed = %v", era, hasDrain)
		}
		rc.Reset()
		_ = s
	}
}

func TestRejectsUnknownFieldsAndBadPages(t *testing.T) {
	s, conn := start(t, Options{Era: EraC})
	if err := s.AddWorker(Worker{Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	// Era D's ListWorkerActorAssignmentsRequest has page_size=2, unknown to C's GetWorkerRequest.
	req := request(t, EraD, "ListWorkerActorAssignments")
	protopath.Set(req, "worker.name", "w1")
	protopath.Set(req, "page_size", 5)
	if _, err := call(t, s, conn, "GetWorker", req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown field: %v", err)
	}
	lw := request(t, EraC, "ListWorkers")
	protopath.Set(lw, "page_size", -1)
	if _, err := call(t, s, conn, "ListWorkers", lw); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative page size: %v", err)
	}
	lw = request(t, EraC, "ListWorkers")
	protopath.Set(lw, "page_token", "garbage!")
	if _, err := call(t, s, conn, "ListWorkers", lw); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad token: %v", err)
	}
	gw := request(t, EraC, "GetWorker")
	protopath.Set(gw, "worker.atespace", "a")
	protopath.Set(gw, "worker.name", "w1")
	if _, err := call(t, s, conn, "GetWorker", gw); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("worker with atespace: %v", err)
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	pki, _ := NewPKI()
	for _, addr := range []string{"0.0.0.0:0", "[::1]:0", ":0"} {
		if s, err := Start(Options{Addr: addr, Certificate: &pki.Certificate}); err == nil {
			s.Stop()
			t.Errorf("listened on %s", addr)
		}
	}
	if _, err := Start(Options{}); err == nil {
		t.Error("started without a certificate")
	}
}

func TestEvictionAndResumeSemantics(t *testing.T) {
	s, _ := start(t, Options{Era: EraD})
	for _, w := range []Worker{{Name: "w1", Node: "n1", Labels: map[string]string{"pool": "old"}}, {Name: "w2", Node: "n2",
		Labels: map[string]string{"pool": "new"}}} {
		if err := s.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.AddActor(Actor{Atespace: "a", Name: "run", State: atestate.ActorRunning, Worker: "w1"})
	_ = s.AddActor(Actor{Atespace: "a", Name: "done", State: atestate.ActorRunning, Worker: "w1"})
	if _, err := s.SuspendActor("a", "done"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkWorkerDraining("w1"); err != nil {
		t.Fatal(err)
	}
	// Draining stops placement on w1 only.
	_ = s.AddActor(Actor{Atespace: "a", Name: "wake", State: atestate.ActorSuspended, WorkerSelector: map[string]string{"pool": "old"}})
	if _, _, err := s.ResumeActor("a", "wake"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("resume onto drained pool: %v", err)
	}
	crashed, err := s.RemoveWorker("w1")
	if err != nil || len(crashed) != 1 || crashed[0].Name != "run" {
		t.Fatalf("crashed = %v, %v", crashed, err)
	}
	run, _ := s.GetActor("a", "run")
	if run.State != atestate.ActorCrashed || run.Worker != "" || run.AssignedNode != "n1" || run.CrashMessage == "" {
		t.Errorf("crashed actor = %+v", run)
	}
	if done, _ := s.GetActor("a", "done"); done.State != atestate.ActorSuspended {
		t.Errorf("suspended actor changed: %+v", done)
	}
	if _, _, err := s.ResumeActor("a", "run"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("resume crashed: %v", err)
	}
	// A paused actor resumes only where its snapshot is, and cannot be
	// suspended once that node's atelet is gone.
	_ = s.AddActor(Actor{Atespace: "a", Name: "paused", State: atestate.ActorPaused, SnapshotNodes: []string{"n1"}})
	if _, _, err := s.ResumeActor("a", "paused"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("paused resumed off its node: %v", err)
	}
	s.SetAteletUp("n1", false)
	if _, err := s.SuspendActor("a", "paused"); status.Code(err) != codes.Unavailable {
		t.Errorf("suspend paused without atelet: %v", err)
	}
	s.SetAteletUp("n1", true)
	if a, err := s.SuspendActor("a", "paused"); err != nil || a.State != atestate.ActorSuspended || len(a.SnapshotNodes) != 0 {
		t.Errorf("suspend paused = %+v, %v", a, err)
	}
	if a, resumed, err := s.ResumeActor("a", "done"); err != nil || !resumed || a.Worker != "w2" {
		t.Errorf("resume = %+v %v %v", a, resumed, err)
	}
	_ = s.AddWorker(Worker{Name: "w3", Node: "n2"})
	_ = s.AddActor(Actor{Atespace: "a", Name: "flaky", State: atestate.ActorRunning, Worker: "w3", CrashOnSuspend: true})
	if _, err := s.SuspendActor("a", "flaky"); status.Code(err) != codes.DataLoss {
		t.Errorf("suspend with a checkpoint crash: %v", err)
	}
	if a, _ := s.GetActor("a", "flaky"); a.State != atestate.ActorCrashed || a.AssignedNode != "n2" {
		t.Errorf("flaky = %+v", a)
	}
}

func TestSuspendNeedsAnAteletOfTheWorkersVersion(t *testing.T) {
	s, _ := start(t, Options{Era: EraC})
	if err := s.AddWorker(Worker{Name: "w", Node: "n1", Dataplane: "v1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddActor(Actor{Atespace: "a", Name: "x", State: atestate.ActorRunning, Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	s.SetAtelets("n1", []string{"v2"}) // the label flipped: v1's atelet left
	if _, err := s.SuspendActor("a", "x"); status.Code(err) != codes.Unavailable {
		t.Fatalf("suspend with only a v2 atelet on the v1 worker's node: %v, want Unavailable", err)
	}
	s.SetAtelets("n1", []string{"v1", "v2"})
	if a, err := s.SuspendActor("a", "x"); err != nil || a.State != atestate.ActorSuspended {
		t.Fatalf("suspend with v1's atelet back: %+v, %v", a, err)
	}
}
