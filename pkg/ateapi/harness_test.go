package ateapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/pkg/atestate"
)

const (
	goodToken     = "tok-good-0123456789abcdef"
	wrongAudToken = "tok-wrongaud-0123456789abcdef"
)

type harness struct {
	srv    *fakesubstrate.Server
	pki    *fakesubstrate.PKI
	caFile string
}

func startFake(t testing.TB, opts fakesubstrate.Options) *harness {
	t.Helper()
	pki, err := fakesubstrate.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	opts.Certificate = &pki.Certificate
	opts.TokenReviewer = fakesubstrate.StaticTokens{
		goodToken:     {Principal: "system:serviceaccount:ate-system:ate-client", Audiences: []string{DefaultAudience}},
		wrongAudToken: {Principal: "system:serviceaccount:ate-system:ate-client", Audiences: []string{"kubernetes.default.svc"}},
	}
	srv, err := fakesubstrate.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pki.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &harness{srv: srv, pki: pki, caFile: caFile}
}

// fastRetry keeps retry tests quick while still exercising backoff.
var fastRetry = RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
	ReconnectWait: 200 * time.Millisecond}

func (h *harness) options() DialOptions {
	return DialOptions{Endpoint: h.srv.Addr(), CAFile: h.caFile, Token: goodToken, Client: ClientOptions{Retry: fastRetry}}
}

func (h *harness) dial(t *testing.T, mutate func(*DialOptions)) (*Client, error) {
	t.Helper()
	o := h.options()
	if mutate != nil {
		mutate(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, o)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

func (h *harness) mustDial(t *testing.T, mutate func(*DialOptions)) *Client {
	t.Helper()
	c, err := h.dial(t, mutate)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

// seedFleet: two nodes; w-a hosts a RUNNING actor, a PAUSED actor has its
// snapshot on n1, one actor is SUSPENDED, one CRASHED pinned to n2.
func seedFleet(t *testing.T, srv *fakesubstrate.Server) {
	t.Helper()
	for _, w := range []fakesubstrate.Worker{
		{Name: "uid-a", Namespace: "ns", Pool: "counter", Pod: "counter-a", Node: "n1", IPs: []string{"10.0.0.1"}, SandboxClass: "gvisor",
			Labels: map[string]string{"app": "counter"}},
		{Name: "uid-b", Namespace: "ns", Pool: "counter", Pod: "counter-b", Node: "n1", IPs: []string{"10.0.0.2"}, SandboxClass: "gvisor",
			Labels: map[string]string{"app": "counter"}},
		{Name: "uid-c", Namespace: "ns", Pool: "counter-v2", Pod: "counter-v2-c", Node: "n2", IPs: []string{"10.0.0.3"},
			SandboxClass: "gvisor", Labels: map[string]string{"app": "counter"}},
	} {
		if err := srv.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []fakesubstrate.Actor{
		{Atespace: "team", Name: "running", State: atestate.ActorRunning, Worker: "uid-a", ExternalSnapshotURI: "gs://s/running/1"},
		{Atespace: "team", Name: "paused", State: atestate.ActorPaused, SnapshotNodes: []string{"n1"}},
		{Atespace: "team", Name: "suspended", State: atestate.ActorSuspended, ExternalSnapshotURI: "gs://s/suspended/1"},
		{Atespace: "other", Name: "crashed", State: atestate.ActorCrashed, AssignedNode: "n2", CrashMessage: "worker deleted"},
	} {
		if err := srv.AddActor(a); err != nil {
			t.Fatal(err)
		}
	}
}
