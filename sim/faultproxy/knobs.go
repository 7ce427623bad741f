package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Faults a test turns on at a moment of its choosing, beside the random
// ones (sim up's control socket, sim/control.go):
//
//   - LoseResponses: the next N mutating requests that match are applied
//     by the apiserver, and their response is lost (the connection drops),
//     as when the network fails after the server committed a write.
//   - Hold: the next matching request is held, unsent, until Release, so
//     a test can stop the caller (SIGSTOP) at that exact point.
//   - Compact: the API server's history up to now is gone (the sim
//     compacts etcd too): every open watch ends, and a watch from an
//     older resourceVersion is answered 410 Gone (Expired), as a watch
//     cache that no longer holds it answers; the client must list again.
//
// Mutations lists the mutating requests the proxy saw, for a test that
// must know whether a caller wrote after a given moment.

// Match selects requests: a method ("" any mutating one) and a substring
// of the path ("" any).
type Match struct {
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
}

func (m Match) matches(r *http.Request) bool {
	return (m.Method == "" && mutating(r) || m.Method == r.Method) && strings.Contains(r.URL.Path, m.Path)
}

func mutating(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// Mutation is one mutating request the proxy forwarded.
type Mutation struct {
	Time   time.Time `json:"time"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Code   int       `json:"code"` // 0: no response reached the client
	Lost   bool      `json:"lost,omitempty"`
}

// maxMutations bounds the mutation log (oldest dropped).
const maxMutations = 20000

type knobs struct {
	mu            sync.Mutex
	lose          int
	loseMatch     Match
	hold          *held
	compacted     int64 // watches from an older resourceVersion get 410
	watches       map[*http.Request]context.CancelFunc
	mutations     []Mutation
	lostCount     int
	gone410       int
	closedWatches int
}

type held struct {
	match    Match
	arrived  chan struct{} // closed when a request is held
	release  chan struct{}
	request  string
	isClosed bool
}

// LoseResponses makes the next n mutating requests that match lose their
// response once applied.
func (p *Proxy) LoseResponses(n int, m Match) {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	p.k.lose, p.k.loseMatch = n, m
}

// Hold holds the next request that matches, and returns once one is held
// (or ctx ends), naming it.
func (p *Proxy) Hold(ctx context.Context, m Match) (string, error) {
	h := &held{match: m, arrived: make(chan struct{}), release: make(chan struct{})}
	p.k.mu.Lock()
	if p.k.hold != nil && !p.k.hold.isClosed {
		close(p.k.hold.release)
	}
	p.k.hold = h
	p.k.mu.Unlock()
	select {
	case <-h.arrived:
		p.k.mu.Lock()
		defer p.k.mu.Unlock()
		return h.request, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Release lets the held request (if any) go on, and holds nothing more.
func (p *Proxy) Release() {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	if p.k.hold != nil && !p.k.hold.isClosed {
		p.k.hold.isClosed = true
		close(p.k.hold.release)
	}
	p.k.hold = nil
}

// Compact ends every open watch and answers 410 Gone to watches from a
// resourceVersion older than rv from now on.
func (p *Proxy) Compact(rv int64) int {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	p.k.compacted = max(p.k.compacted, rv)
	n := 0
	for r, cancel := range p.k.watches {
		cancel()
		delete(p.k.watches, r)
		n++
	}
	p.k.closedWatches += n
	return n
}

// Mutations returns the mutating requests forwarded at or after since.
func (p *Proxy) Mutations(since time.Time) []Mutation {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	var out []Mutation
	for _, m := range p.k.mutations {
		if !m.Time.Before(since) {
			out = append(out, m)
		}
	}
	return out
}

// KnobStats counts what the knobs did.
type KnobStats struct {
	Lost          int `json:"lostResponses"`
	Gone          int `json:"gone410"`
	ClosedWatches int `json:"closedWatches"`
}

// Knobs returns the counts of the test-driven faults.
func (p *Proxy) Knobs() KnobStats {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	return KnobStats{Lost: p.k.lostCount, Gone: p.k.gone410, ClosedWatches: p.k.closedWatches}
}

// holdIfAsked blocks a request the hold matches until Release.
func (p *Proxy) holdIfAsked(r *http.Request) {
	p.k.mu.Lock()
	h := p.k.hold
	if h == nil || h.isClosed || !h.match.matches(r) {
		p.k.mu.Unlock()
		return
	}
	select {
	case <-h.arrived:
		p.k.mu.Unlock()
		return // one request only
	default:
	}
	p.k.mu.Unlock()
	// Held once the client has sent all of it: a test that stops the
	// client "right after it sent a write" means the write, not headers
	// whose body the stopped client would send only once resumed (the
	// server then times the request out, 504, at the resume).
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	p.k.mu.Lock()
	select {
	case <-h.arrived:
		p.k.mu.Unlock()
		return // another request took the hold meanwhile
	default:
	}
	h.request = r.Method + " " + r.URL.RequestURI()
	close(h.arrived)
	p.k.mu.Unlock()
	select {
	case <-h.release:
	case <-r.Context().Done():
	}
}

// tooOld answers a watch from a compacted resourceVersion with 410 Gone.
func (p *Proxy) tooOld(w http.ResponseWriter, r *http.Request) bool {
	if !isWatch(r) {
		return false
	}
	rv, err := strconv.ParseInt(r.URL.Query().Get("resourceVersion"), 10, 64)
	p.k.mu.Lock()
	compacted := p.k.compacted
	if err != nil || rv <= 0 || rv >= compacted {
		p.k.mu.Unlock()
		return false
	}
	p.k.gone410++
	p.k.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410,
		"message": fmt.Sprintf("too old resource version: %d (%d)", rv, compacted)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusGone)
	_, _ = w.Write(b)
	return true
}

func isWatch(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" ||
		strings.Contains(r.URL.Path, "/watch/"))
}

// trackWatch makes r cancellable by Compact; the returned func forgets it.
func (p *Proxy) trackWatch(r *http.Request) (*http.Request, func()) {
	if !isWatch(r) {
		return r, func() {}
	}
	ctx, cancel := context.WithCancel(r.Context())
	r2 := r.WithContext(ctx)
	p.k.mu.Lock()
	if p.k.watches == nil {
		p.k.watches = map[*http.Request]context.CancelFunc{}
	}
	p.k.watches[r2] = cancel
	p.k.mu.Unlock()
	return r2, func() {
		p.k.mu.Lock()
		delete(p.k.watches, r2)
		p.k.mu.Unlock()
		cancel()
	}
}

// loseThis reports whether r's response is to be lost (and counts it).
func (p *Proxy) loseThis(r *http.Request) bool {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	if p.k.lose <= 0 || !mutating(r) || !p.k.loseMatch.matches(r) {
		return false
	}
	p.k.lose--
	p.k.lostCount++
	return true
}

func (p *Proxy) logMutation(r *http.Request, code int, lost bool) {
	if !mutating(r) {
		return
	}
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	if len(p.k.mutations) >= maxMutations {
		p.k.mutations = p.k.mutations[1:]
	}
	p.k.mutations = append(p.k.mutations, Mutation{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Code: code, Lost: lost})
}

// codeRecorder remembers the status code written.
type codeRecorder struct {
	http.ResponseWriter
	code int
}

func (c *codeRecorder) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *codeRecorder) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

func (c *codeRecorder) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *codeRecorder) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// discard is a ResponseWriter that keeps nothing: the response of a
// request whose answer is lost.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}
