package lease

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// Gate holds every mutating request of a run's API clients until its lock
// says the run may still act (Lock.Check): a run that was suspended or
// stopped past its Lease, or whose Lease was deleted or taken, learns so
// before its next write reaches the cluster, whichever code path makes it.
// Until Arm, and for reads, it lets everything through.
//
// What remains is the moment between the check and the request's arrival
// at the API server (microseconds, unless the process is stopped in
// exactly that moment): a Lease cannot fence a request already sent.
type Gate struct {
	armed atomic.Pointer[armedGate]
}

type armedGate struct {
	lock   *Lock
	exempt []func(*http.Request) bool
}

// Arm makes every later mutation wait for l.Check. Writes of the Lease
// itself (the lock's own renewals), Events, and requests that change
// nothing (access and identity reviews) pass, as do those exempt says so
// of: the run's history, which records what happened even to a run that
// lost its lock.
func (g *Gate) Arm(l *Lock, exempt ...func(*http.Request) bool) {
	g.armed.Store(&armedGate{lock: l, exempt: exempt})
}

// Check is Lock.Check of the armed lock (nil when unarmed), for what does
// not pass a client's transport: the substrate's control API (gRPC).
func (g *Gate) Check(ctx context.Context) error {
	a := g.armed.Load()
	if a == nil {
		return nil
	}
	return a.lock.Check(ctx)
}

// Disarm lets everything through again (the run ended).
func (g *Gate) Disarm() { g.armed.Store(nil) }

// Wrap is the gate as a transport wrapper (rest.Config.Wrap).
func (g *Gate) Wrap(rt http.RoundTripper) http.RoundTripper {
	return gateRT{g: g, rt: rt}
}

type gateRT struct {
	g  *Gate
	rt http.RoundTripper
}

func (t gateRT) RoundTrip(r *http.Request) (*http.Response, error) {
	a := t.g.armed.Load()
	if a == nil || !Mutates(r) || a.passes(r) {
		return t.rt.RoundTrip(r)
	}
	if err := a.lock.Check(r.Context()); err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, fmt.Errorf("not sent: %w", err)
	}
	return t.rt.RoundTrip(r)
}

// Mutates reports a request that may change the cluster: any verb but a
// read.
func Mutates(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

func (a *armedGate) passes(r *http.Request) bool {
	p := r.URL.Path
	if p == a.lock.leasePath() || strings.HasPrefix(p, "/apis/authentication.k8s.io/") ||
		strings.HasPrefix(p, "/apis/authorization.k8s.io/") || strings.HasPrefix(p, "/apis/events.k8s.io/") || isCoreEvents(p) {
		return true
	}
	for _, e := range a.exempt {
		if e(r) {
			return true
		}
	}
	return false
}

// isCoreEvents: /api/v1/namespaces/NS/events[/NAME].
func isCoreEvents(p string) bool {
	rest, ok := strings.CutPrefix(p, "/api/v1/namespaces/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	return len(parts) >= 2 && parts[1] == "events"
}

// ObjectPath is the API path of a named core object, "/api/v1/namespaces/NS/RESOURCE/NAME",
// for exemptions.
func ObjectPath(ns, resource, name string) func(*http.Request) bool {
	want := "/api/v1/namespaces/" + ns + "/" + resource + "/" + name
	return func(r *http.Request) bool { return r.URL.Path == want }
}

func (l *Lock) leasePath() string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + l.ns + "/leases/" + l.name
}
