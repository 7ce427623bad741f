//go:build e2e

package clustertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ateapi"
)

// The ate-fleet scenario's pools and actors (sim/scenario/atefleet.go).
var (
	wantPools  = map[string]int{"python-small": 4, "python-large": 2}
	wantActors = []string{"batch/job-1", "batch/job-2", "demo/chat-1", "demo/chat-2", "demo/chat-3", "demo/notebook-1",
		"team-a/etl-1", "team-a/etl-2", "team-a/etl-3"}
)

func TestDialThroughPortForward(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	cl, err := ateapi.Dial(ctx, ateapi.DialOptions{RESTConfig: c.RESTConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	checkFleet(ctx, t, cl)
	if !cl.Capabilities().Has("DrainWorker") || !cl.Capabilities().DrainImplemented {
		t.Errorf("capabilities %+v: want DrainWorker served", cl.Capabilities())
	}
}

func TestDialEndpointAndCAFile(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	endpoint := readEndpoint(t, c.Dir)
	caFile := filepath.Join(c.Dir, "ate-ca.pem")

	t.Run("token by TokenRequest", func(t *testing.T) {
		cl, err := ateapi.Dial(ctx, ateapi.DialOptions{Endpoint: endpoint, CAFile: caFile, RESTConfig: c.RESTConfig})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		checkFleet(ctx, t, cl)
	})
	t.Run("token file, no cluster", func(t *testing.T) {
		tokFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokFile, []byte(mintToken(ctx, t, c, "ate-system", "ate-client", "api.ate-system.svc")), 0o600); err != nil {
			t.Fatal(err)
		}
		cl, err := ateapi.Dial(ctx, ateapi.DialOptions{Endpoint: endpoint, CAFile: caFile, TokenFile: tokFile})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		checkFleet(ctx, t, cl)
	})
}

func TestRefusesOtherTokens(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns}}
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{
		"another service account": mintToken(ctx, t, c, ns, "intruder", "api.ate-system.svc"),
		"wrong audience":          mintToken(ctx, t, c, "ate-system", "ate-client", "https://kubernetes.default.svc.cluster.local"),
		"garbage":                 "not-a-jwt",
	} {
		t.Run(name, func(t *testing.T) {
			cl, err := ateapi.Dial(ctx, ateapi.DialOptions{RESTConfig: c.RESTConfig, Token: ateapi.Secret(tok),
				Client: ateapi.ClientOptions{Retry: ateapi.RetryPolicy{MaxAttempts: 1}}})
			if err == nil {
				_, err = cl.ListWorkers(ctx)
				cl.Close()
			}
			if !errors.Is(err, ateapi.ErrUnauthenticated) {
				t.Fatalf("want Unauthenticated, got %v", err)
			}
			if strings.Contains(err.Error(), tok) {
				t.Fatalf("error shows the token: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func TestRefusesWrongCA(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	other, err := fakesubstrate.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(caFile, other.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, endpoint := range map[string]string{"endpoint": readEndpoint(t, c.Dir), "port-forward": ""} {
		t.Run(name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			cl, err := ateapi.Dial(cctx, ateapi.DialOptions{Endpoint: endpoint, CAFile: caFile, RESTConfig: c.RESTConfig,
				Client: ateapi.ClientOptions{Retry: ateapi.RetryPolicy{MaxAttempts: 1}}})
			if err == nil {
				_, err = cl.ListWorkers(cctx)
				cl.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("want a certificate verification error, got %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func checkFleet(ctx context.Context, t *testing.T, cl *ateapi.Client) {
	t.Helper()
	workers, err := cl.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]int{}
	for _, w := range workers {
		pools[w.Pool]++
		if w.Name == "" || w.Node == "" || w.Pod == "" {
			t.Errorf("worker without identity: %+v", w)
		}
	}
	for p, n := range wantPools {
		if pools[p] < n {
			t.Errorf("pool %s: %d workers, want %d (all: %v)", p, pools[p], n, pools)
		}
	}
	actors, err := cl.ListActors(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range actors {
		got = append(got, a.Ref().String())
	}
	for _, want := range wantActors {
		if !slices.Contains(got, want) {
			t.Errorf("actor %s missing from %v", want, got)
		}
	}
}

func readEndpoint(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ate-endpoint"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func mintToken(ctx context.Context, t *testing.T, c *simtest.Cluster, ns, sa, audience string) string {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
