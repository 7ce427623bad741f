// Package cutoff makes a write the server applied look, to the client, as
// interrupted, or as answered by a dropped connection: for tests of what a
// run does when it is stopped mid-request or its answer is lost.
package cutoff

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/internal/httpcount"
)

// Config returns a copy of cfg whose first request that match selects and
// the server applies (a 2xx answer) is sent and answered, then stop is
// called (the run is interrupted) and the client sees only
// context.Canceled. A matching request the server refused (a 409 on a
// resourceVersion precondition, when a heartbeat changed the node) goes
// back to the client as it is: it applied nothing, and its retry is the
// one to cut.
func Config(cfg *rest.Config, match func(*http.Request) bool, stop func()) *rest.Config {
	return cut(cfg, match, func() error { stop(); return context.Canceled })
}

// LoseAnswer returns a copy of cfg whose first request that match selects
// and the server applies is answered, and the answer lost: the client
// sees io.ErrUnexpectedEOF, as when the connection drops after the server
// committed a write, while the run goes on.
func LoseAnswer(cfg *rest.Config, match func(*http.Request) bool) *rest.Config {
	return cut(cfg, match, func() error { return io.ErrUnexpectedEOF })
}

func cut(cfg *rest.Config, match func(*http.Request) bool, then func() error) *rest.Config {
	var mu sync.Mutex
	cut := false
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return httpcount.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			done := cut
			mu.Unlock()
			if done || !match(r) {
				return rt.RoundTrip(r)
			}
			// The server must apply it whatever happens to the caller.
			resp, err := rt.RoundTrip(r.WithContext(context.WithoutCancel(r.Context())))
			if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
				return resp, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			mu.Lock()
			cut = true
			mu.Unlock()
			return nil, then()
		})
	})
	return cfg
}

// Method matches requests with this verb whose path ends in suffix.
func Method(verb, suffix string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == verb && strings.HasSuffix(r.URL.Path, suffix)
	}
}
