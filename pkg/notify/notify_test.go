package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestValidateURL(t *testing.T) {
	for _, ok := range []string{"https://hooks.slack.com/services/T0/B0/x", "https://example.com:8443/hook?x=1",
		"http://127.0.0.1:9000/hook", "http://[::1]:9000/", "http://localhost/hook", "http://127.3.4.5/"} {
		if err := ValidateURL(ok); err != nil {
			t.Errorf("ValidateURL(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "hooks.slack.com/x", "http://example.com/hook", "http://10.0.0.1/hook", "http://[::2]/",
		"http://localhost.example.com/", "ftp://127.0.0.1/", "file:///etc/passwd", "https://user:pw@example.com/hook",
		"https://example.com/hook#frag", "https:opaque", "https:///path", "javascript:alert(1)", "http://127.0.0.1.nip.io/"} {
		if err := ValidateURL(bad); err == nil {
			t.Errorf("ValidateURL(%q) accepted it", bad)
		} else if strings.Contains(err.Error(), "/hook") && strings.Contains(bad, "/hook") {
			t.Errorf("ValidateURL(%q): the error %q repeats the URL's path (a secret)", bad, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"GET https://u:p@bucket.example/fw.tar?X-Amz-Signature=abc: 403": "GET https://bucket.example/fw.tar?REDACTED 403",
		"clone https://tok@github.com/tenstorrent/tt-kmd failed":         "clone https://github.com/tenstorrent/tt-kmd failed",
		"plain https://example.com/a and no secret":                      "plain https://example.com/a and no secret",
		"no url here": "no url here",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// receiver records the bodies posted to it, in order.
type receiver struct {
	mu     sync.Mutex
	events []Event
	hold   chan struct{} // while open, every post waits
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.hold != nil {
		<-r.hold
	}
	b, _ := io.ReadAll(req.Body)
	var e Event
	if req.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events arrive in the order sent, with Slack's text and the fields, and
// nothing of a credential in a reason.
func TestEventsArriveInOrder(t *testing.T) {
	rec := &receiver{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	n := New(srv.URL+"/hook", func(m string) { t.Errorf("warned: %s", m) })
	kinds := []string{Resumed, NodeBlocked, NodeFailed, Paused, Done}
	for i, k := range kinds {
		n.Send(Event{Kind: k, Text: k, Run: "r1", Node: "node/n" + string(rune('0'+i)),
			Reason: "fetch https://bucket.example/b?sig=secret failed"})
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.events) != len(kinds) {
		t.Fatalf("%d events received, want %d", len(rec.events), len(kinds))
	}
	for i, e := range rec.events {
		if e.Kind != kinds[i] || e.Text != kinds[i] || e.Run != "r1" || e.Time.IsZero() {
			t.Errorf("event %d: %+v, want %s", i, e, kinds[i])
		}
		if strings.Contains(e.Reason, "secret") {
			t.Errorf("event %d posts a credential: %q", i, e.Reason)
		}
	}
}

// A receiver that does not answer never holds up Send: the queue takes
// what fits, the rest is dropped and counted, and Close gives up at its
// deadline saying so.
func TestHungReceiverNeverBlocksTheRoll(t *testing.T) {
	rec := &receiver{hold: make(chan struct{})}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	defer close(rec.hold)
	var warned []string
	n := New(srv.URL, func(m string) { warned = append(warned, m) })
	for range queueSize * 3 {
		n.Send(Event{Kind: NodeFailed})
	}
	n.mu.Lock()
	dropped := n.dropped
	n.mu.Unlock()
	if dropped < queueSize {
		t.Errorf("%d dropped of %d sent to a hung receiver: Send must drop, not wait", dropped, queueSize*3)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Close(ctx); err == nil {
		t.Error("Close with events undelivered returned no error")
	}
}

// A receiver that refuses is warned about once, without the URL.
func TestRefusedPostWarnsOnceWithoutTheURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	defer srv.Close()
	var warned []string
	n := New(srv.URL+"/services/T0/B0/SECRETPATH", func(m string) { warned = append(warned, m) })
	n.Send(Event{Kind: Paused})
	n.Send(Event{Kind: Done})
	err := n.Close(context.Background())
	if err == nil || len(warned) != 1 || strings.Contains(warned[0], "SECRETPATH") || !strings.Contains(warned[0], "403") {
		t.Errorf("Close: %v; warnings %q", err, warned)
	}
}
