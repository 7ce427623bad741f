// Package notify posts a roll's events to a webhook (--notify-url): a
// small JSON body that Slack's incoming webhooks take (its "text") and
// that a script reads (the other fields). Posting never holds up the
// roll: events queue, one goroutine posts them in order, each post has a
// bounded time, and a full queue drops (and counts) rather than waits.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"time"
)

// Event kinds.
const (
	NodeBlocked = "node_blocked"
	NodeFailed  = "node_failed"
	Paused      = "paused"
	Resumed     = "resumed"
	Done        = "done"
)

// Event is one body posted.
type Event struct {
	// Text is the line Slack shows.
	Text string `json:"text"`
	// Kind is one of the event kinds.
	Kind    string    `json:"event"`
	Plugin  string    `json:"plugin"`
	Run     string    `json:"run"`
	Context string    `json:"context,omitempty"` // the kube context the run acts on
	Node    string    `json:"node,omitempty"`
	Outcome string    `json:"outcome,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Done    int       `json:"done,omitempty"`
	Total   int       `json:"total,omitempty"`
	Time    time.Time `json:"time"`
}

// ValidateURL accepts https, or http only to a loopback address (a
// receiver on this machine): a webhook URL carries its secret in the
// path, and plain http elsewhere would send it, and the roll's events, in
// the clear. User info is refused: it would be a second credential.
func ValidateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("notify-url: want https://HOST/PATH (or http://127.0.0.1:PORT/PATH for a local receiver)")
	}
	if u.User != nil {
		return fmt.Errorf("notify-url: no user or password in the URL")
	}
	if u.Fragment != "" {
		return fmt.Errorf("notify-url: no #fragment")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if host == "localhost" {
			return nil
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("notify-url: http only to a loopback address (127.0.0.1, ::1, localhost); use https for %s", host)
	default:
		return fmt.Errorf("notify-url: scheme %q: want https (or http to a loopback address)", u.Scheme)
	}
}

// Timeout bounds one post.
const Timeout = 5 * time.Second

// queueSize is how many events may wait; beyond it events are dropped.
const queueSize = 64

// Notifier posts events to one URL.
type Notifier struct {
	url    string
	client *http.Client
	send   func(Event) error // post, or a test's
	warn   func(string)
	q      chan Event
	done   chan struct{}

	mu      sync.Mutex
	closed  bool
	dropped int
	failed  int
}

// New starts posting to rawURL (ValidateURL first); warn reports the
// first failed post (never the URL: its path is a secret).
func New(rawURL string, warn func(string)) *Notifier {
	n := &Notifier{url: rawURL, warn: warn, q: make(chan Event, queueSize), done: make(chan struct{}),
		client: &http.Client{
			Timeout: Timeout,
			// A redirect could lead the body anywhere; a webhook does not redirect.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}}
	n.send = n.post
	go n.loop()
	return n
}

// NewFunc delivers events through send instead of HTTP (tests), with
// the same queue, order and bounds.
func NewFunc(send func(Event) error, warn func(string)) *Notifier {
	n := &Notifier{send: send, warn: warn, q: make(chan Event, queueSize), done: make(chan struct{})}
	go n.loop()
	return n
}

// Send queues e; it never blocks.
func (n *Notifier) Send(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Text, e.Reason = Redact(e.Text), Redact(e.Reason)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	select {
	case n.q <- e:
	default:
		n.dropped++
	}
}

// Close posts what is queued, for at most as long as ctx allows, and
// stops. It reports how many events were not delivered.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.q)
	}
	n.mu.Unlock()
	select {
	case <-n.done:
	case <-ctx.Done():
		return fmt.Errorf("notify-url: gave up on the events still queued: %w", ctx.Err())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dropped+n.failed > 0 {
		return fmt.Errorf("notify-url: %d event(s) not delivered", n.dropped+n.failed)
	}
	return nil
}

func (n *Notifier) loop() {
	defer close(n.done)
	for e := range n.q {
		if err := n.send(e); err != nil {
			n.mu.Lock()
			n.failed++
			first := n.failed == 1
			n.mu.Unlock()
			if first && n.warn != nil {
				n.warn(fmt.Sprintf("warning: could not post the %s event to --notify-url: %v (the roll goes on)", e.Kind, err))
			}
		}
	}
}

func (n *Notifier) post(e Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return errors.New("bad request")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, whose path is a secret
		}
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

var urlInText = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+`)

// Redact drops user info, query and fragment from every URL in s (a
// presigned URL keeps its signature in the query), so an error that
// quotes one posts no credential.
func Redact(s string) string {
	return urlInText.ReplaceAllStringFunc(s, func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			return "REDACTED-URL"
		}
		if u.User == nil && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery {
			return raw
		}
		q := u.RawQuery != "" || u.ForceQuery
		u.User, u.RawQuery, u.Fragment, u.ForceQuery, u.RawFragment = nil, "", "", false, ""
		if q {
			return u.String() + "?REDACTED"
		}
		return u.String()
	})
}
