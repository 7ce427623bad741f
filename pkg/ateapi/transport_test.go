package ateapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

func TestWrongCAIsRefused(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{})
	other, err := fakesubstrate.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherCA, other.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = h.dial(t, func(o *DialOptions) { o.CAFile = otherCA })
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("dial with wrong CA = %v, want a certificate error", err)
	}
	_, err = h.dial(t, func(o *DialOptions) { o.ServerName = "evil.example" })
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("dial with wrong server name = %v, want a certificate error", err)
	}
	if h.srv.Calls("ListWorkers") != 0 {
		t.Error("a call got through an unverified connection")
	}
}

func TestMissingAndWrongAudienceTokensAreRefused(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{})
	// No per-RPC credentials at all: even reflection is refused.
	conn, err := grpc.NewClient("passthrough:///"+h.srv.Addr(), grpc.WithTransportCredentials(
		credentials.NewTLS(&tls.Config{RootCAs: h.pki.CAPool, ServerName: DefaultServerName, MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = NewClient(context.Background(), conn, ClientOptions{Retry: fastRetry})
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "missing bearer token") {
		t.Fatalf("no token: %v", err)
	}

	_, err = h.dial(t, func(o *DialOptions) { o.Token = wrongAudToken })
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "audience") {
		t.Fatalf("wrong audience: %v", err)
	}
	if strings.Contains(err.Error(), wrongAudToken) {
		t.Fatal("error text contains the token")
	}
	if _, err = h.dial(t, func(o *DialOptions) { o.Token = "nonsense-token-xyz" }); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unknown token: %v", err)
	}
}

func TestTokenFile(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{})
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(goodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := h.mustDial(t, func(o *DialOptions) { o.Token = ""; o.TokenFile = p })
	if _, err := c.ListWorkers(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An emptied token file fails the call without sending a blank token.
	if err := os.WriteFile(p, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := c.ListWorkers(context.Background())
	if err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty token file: %v", err)
	}
}

func TestPaginationTinyAndEmptyPages(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{EmptyPages: true})
	for i := range 5 {
		if err := h.srv.AddWorker(fakesubstrate.Worker{Name: fmt.Sprintf("w%d", i), Node: "n1"}); err != nil {
			t.Fatal(err)
		}
		if err := h.srv.AddActor(fakesubstrate.Actor{Atespace: []string{"a", "b"}[i%2], Name: fmt.Sprintf("x%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	c := h.mustDial(t, func(o *DialOptions) { o.Client.PageSize = 1 })
	ws, err := c.ListWorkers(context.Background())
	if err != nil || len(ws) != 5 {
		t.Fatalf("workers = %d, %v", len(ws), err)
	}
	// 5 one-item pages, each preceded by an empty page that carries a token.
	if n := h.srv.Calls("ListWorkers"); n != 10 {
		t.Errorf("ListWorkers calls = %d, want 10", n)
	}
	as, err := c.ListActors(context.Background(), "a")
	if err != nil || len(as) != 3 {
		t.Fatalf("actors in a = %d, %v", len(as), err)
	}
	all, err := c.ListActors(context.Background(), "")
	if err != nil || len(all) != 5 {
		t.Fatalf("all actors = %d, %v", len(all), err)
	}

	bounded := h.mustDial(t, func(o *DialOptions) { o.Client.PageSize = 1; o.Client.MaxPages = 3 })
	if _, err := bounded.ListWorkers(context.Background()); !errors.Is(err, ErrTooManyPages) {
		t.Fatalf("bounded list = %v", err)
	}
}

func TestRetriesAbortedAndUnavailable(t *testing.T) {
	ctx := context.Background()
	h := startFake(t, fakesubstrate.Options{})
	seedFleet(t, h.srv)
	c := h.mustDial(t, nil)

	h.srv.InjectFault("SuspendActor", codes.Aborted, 2)
	if a, err := c.SuspendActor(ctx, "team", "running"); err != nil || a.State != ActorSuspended {
		t.Fatalf("suspend after 2 aborts = %+v, %v", a, err)
	}
	if n := h.srv.Calls("SuspendActor"); n != 3 {
		t.Errorf("SuspendActor calls = %d, want 3", n)
	}
	h.srv.InjectFault("ListWorkers", codes.Unavailable, 3)
	if ws, err := c.ListWorkers(ctx); err != nil || len(ws) != 3 {
		t.Fatalf("list after 3 unavailable = %d, %v", len(ws), err)
	}

	h.srv.InjectFault("GetActor", codes.Aborted, 10)
	calls := h.srv.Calls("GetActor")
	_, err := c.GetActor(ctx, "team", "paused")
	if !errors.Is(err, ErrAborted) || !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("exhausted aborts = %v", err)
	}
	for _, want := range []string{"GetActor team/paused", "another operation is in progress", "gave up after 4 attempts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// The test policy's attempts, counted on the server, not its wall time.
	if n := h.srv.Calls("GetActor") - calls; n != fastRetry.MaxAttempts {
		t.Errorf("GetActor attempts = %d, want the policy's %d", n, fastRetry.MaxAttempts)
	}
	h.srv.InjectFault("DrainWorker", codes.Unavailable, 10)
	if _, err := c.DrainWorker(ctx, "uid-a"); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("exhausted unavailable = %v", err)
	}
	// Not retried: FailedPrecondition is an answer, not a hiccup.
	before := h.srv.Calls("SuspendActor")
	if _, err := c.SuspendActor(ctx, "other", "crashed"); errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("failed precondition was retried: %v", err)
	}
	if n := h.srv.Calls("SuspendActor") - before; n != 1 {
		t.Errorf("FailedPrecondition sent %d times", n)
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{})
	const secret = "super-secret-bearer-value-42"
	o := h.options()
	o.Token = secret
	creds := NewBearerCredentials(StaticToken(o.Token))
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		for _, v := range []any{o, &o, o.Token, creds, *creds} {
			if s := fmt.Sprintf(f, v); strings.Contains(s, secret) || strings.Contains(s, fmt.Sprintf("%x", secret)) {
				t.Errorf("%s of %T leaks the token: %s", f, v, s)
			}
		}
	}
	if o.Token.Reveal() != secret {
		t.Error("Reveal lost the value")
	}
	c := h.mustDial(t, nil)
	for _, f := range []string{"%v", "%+v", "%#v"} {
		if s := fmt.Sprintf(f, c); strings.Contains(s, goodToken) {
			t.Errorf("%s of Client leaks the token", f)
		}
	}
	// A server that echoes the token in an error gets it scrubbed.
	creds2 := NewBearerCredentials(StaticToken(secret))
	if _, err := creds2.GetRequestMetadata(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.creds = creds2
	e := c.wrap("GetActor", "a/b", errors.New("rpc error: code = Unauthenticated desc = bad token "+secret), 1)
	if strings.Contains(e.Error(), secret) {
		t.Errorf("echoed token not scrubbed: %s", e)
	}
}
