package kube

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A laptop 3 minutes behind the API server learns the offset from the Date
// headers to within the round trip, whatever the sub-second phase of the
// responses; a clock stepped since starts the estimate afresh.
func TestServerClockLearnsTheOffsetFromDates(t *testing.T) {
	const skew = 3*time.Minute + 400*time.Millisecond
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	local := base
	c := &ServerClock{local: func() time.Time { return local }}
	if got := c.Now(); !got.Equal(base) {
		t.Fatalf("before any response: %s, want the local clock", got)
	}
	const rtt = 20 * time.Millisecond
	for i := 0; i < 50; i++ {
		sent := local
		server := sent.Add(rtt / 2).Add(skew)
		c.Observe(sent, sent.Add(rtt), server.Truncate(time.Second))
		local = local.Add(137 * time.Millisecond) // responses at every phase of the second
	}
	off, ok := c.Offset()
	if !ok || off < skew-rtt || off > skew+rtt {
		t.Fatalf("offset %s (known %v), want %s within %s", off, ok, skew, rtt)
	}
	// The laptop's clock is stepped forward an hour (NTP caught up).
	local = local.Add(time.Hour)
	sent := local
	c.Observe(sent, sent.Add(rtt), sent.Add(rtt/2).Add(skew-time.Hour).Truncate(time.Second))
	if off, _ := c.Offset(); off > skew-time.Hour+time.Second || off < skew-time.Hour-time.Second {
		t.Fatalf("after the step: offset %s, want about %s", off, skew-time.Hour)
	}
}

// Every response through the wrapped transport feeds the clock.
func TestObserveServerClockReadsDate(t *testing.T) {
	ahead := time.Now().Add(10 * time.Minute).UTC()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", ahead.Format(http.TimeFormat))
	}))
	defer srv.Close()
	c := &ServerClock{}
	client := &http.Client{Transport: serverClockRT{rt: http.DefaultTransport, clock: c}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if off, ok := c.Offset(); !ok || off < 9*time.Minute || off > 11*time.Minute {
		t.Fatalf("offset %s (known %v), want about 10m", off, ok)
	}
}

// A helper is stale by the API server's clock, which wrote its
// creationTimestamp: a laptop an hour ahead neither deletes a helper the
// server created a moment ago (its cluster calls would go to a nil client)
// nor keeps one the server's clock says outlived its deadline.
func TestHelperStalenessIsJudgedOnTheServersClock(t *testing.T) {
	Server.mu.Lock()
	known, lo, hi, local := Server.known, Server.lo, Server.hi, Server.local
	Server.mu.Unlock()
	defer func() {
		Server.mu.Lock()
		Server.known, Server.lo, Server.hi, Server.local = known, lo, hi, local
		Server.mu.Unlock()
	}()
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	Server.mu.Lock()
	Server.known, Server.local = false, ahead
	Server.mu.Unlock()
	now := time.Now()
	Server.Observe(ahead(), ahead(), now.Truncate(time.Second))
	deadline := int64(60)
	pod := func(created time.Time, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns", Labels: map[string]string{LabelHelper: "kmd"},
			CreationTimestamp: metav1.NewTime(created)}, Spec: corev1.PodSpec{ActiveDeadlineSeconds: &deadline},
			Status: corev1.PodStatus{Phase: phase}}
	}
	deleted, err := CleanupHelperPods(t.Context(), nil, nil, []corev1.Pod{pod(now, corev1.PodRunning)}, "kmd")
	if err != nil || len(deleted) != 0 {
		t.Fatalf("a helper created now was taken for stale: %v %v", deleted, err)
	}
	if !helperStale(&[]corev1.Pod{pod(now.Add(-3*time.Minute), corev1.PodRunning)}[0], ServerNow()) {
		t.Fatal("a helper 3 minutes past its 1-minute deadline by the server's clock is not stale")
	}
}
