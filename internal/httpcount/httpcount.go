// Package httpcount counts the requests a clientset sends, at its transport:
// for tests that hold one call to a request budget against a real API server.
package httpcount

import (
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RoundTripFunc is an http.RoundTripper made of a function.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Client returns a clientset for cfg and the count of requests it has sent.
func Client(cfg *rest.Config) (kubernetes.Interface, *atomic.Int32) {
	var n atomic.Int32
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return RoundTripFunc(func(r *http.Request) (*http.Response, error) { n.Add(1); return rt.RoundTrip(r) })
	})
	return kubernetes.NewForConfigOrDie(cfg), &n
}
