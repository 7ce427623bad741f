// Package cutoff makes a write the server applied look, to the client, as
// interrupted: for tests of what a run does when it is stopped mid-request.
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

// Config returns a copy of cfg whose first request that match selects is
// sent and answered by the server, then stop is called (the run is
// interrupted) and the client sees only context.Canceled.
func Config(cfg *rest.Config, match func(*http.Request) bool, stop func()) *rest.Config {
	var once sync.Once
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return httpcount.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			hit := false
			if match(r) {
				once.Do(func() { hit = true })
			}
			if !hit {
				return rt.RoundTrip(r)
			}
			// The server must apply it whatever happens to the caller.
			resp, err := rt.RoundTrip(r.WithContext(context.WithoutCancel(r.Context())))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			stop()
			return nil, context.Canceled
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
