package lease

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

type countingRT struct{ sent []string }

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.sent = append(c.sent, r.Method+" "+r.URL.Path)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// The gate holds every write of a run whose lock cannot vouch for it, on
// any path, and lets through reads, the lock's own Lease, Events and what
// the run exempts (its history).
func TestGateHoldsWritesOfARunThatLostItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore()
		clock := newMachineClock()
		l := acquire(t, s, runOn("laptop"), LockOptions{BootClock: clock.read})
		defer func() { _ = l.Release(t.Context()) }()
		inner := &countingRT{}
		g := &Gate{}
		rt := g.Wrap(inner)
		send := func(method, path string) error {
			r, _ := http.NewRequestWithContext(t.Context(), method, "https://api"+path, nil)
			_, err := rt.RoundTrip(r)
			return err
		}
		cordon := "/api/v1/nodes/n1"
		if err := send(http.MethodPatch, cordon); err != nil {
			t.Fatalf("an unarmed gate held a write: %v", err)
		}
		g.Arm(l, ObjectPath("ns", "configmaps", "history"))
		if err := send(http.MethodPatch, cordon); err != nil {
			t.Fatalf("a held lock's write was refused: %v", err)
		}
		clock.sleep(time.Hour)
		takeOver(s, runOn("ci"))
		inner.sent = nil
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			for _, p := range []string{cordon, "/api/v1/namespaces/rollbook-system/pods", "/apis/policy/v1/namespaces/x/poddisruptionbudgets/p"} {
				if err := send(m, p); err == nil || !strings.Contains(err.Error(), "held by "+runOn("ci").Identity()) {
					t.Errorf("%s %s after the Lease was taken: %v", m, p, err)
				}
			}
		}
		if len(inner.sent) != 0 {
			t.Fatalf("writes reached the API server after the Lease was taken: %v", inner.sent)
		}
		if err := g.Check(t.Context()); err == nil {
			t.Error("Check (the control API's gate) lets a call through after the Lease was taken")
		}
		for _, ok := range [][2]string{
			{http.MethodGet, cordon},
			{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/rollbook-test"},
			{http.MethodPost, "/api/v1/namespaces/default/events"},
			{http.MethodPatch, "/apis/events.k8s.io/v1/namespaces/default/events/e1"},
			{http.MethodPut, "/api/v1/namespaces/ns/configmaps/history"},
			{http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"},
		} {
			if err := send(ok[0], ok[1]); err != nil {
				t.Errorf("%s %s was held: %v", ok[0], ok[1], err)
			}
		}
		if len(inner.sent) != 6 {
			t.Errorf("sent %v", inner.sent)
		}
		g.Disarm()
		if err := send(http.MethodPatch, cordon); err != nil || g.Check(t.Context()) != nil {
			t.Errorf("a disarmed gate held a write: %v", err)
		}
	})
}
