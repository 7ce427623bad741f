package chaostest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"
)

// SimControl injects the faults a test times itself through the sim's
// control socket (sim up: DIR/control.sock; the proxy's ones need
// --api-proxy or --api-faults): an apiserver restart, an etcd compaction,
// write responses lost once applied, a request held at the proxy.
type SimControl struct {
	hc *http.Client
}

// Control returns the control of the sim running in dir.
func Control(dir string) *SimControl {
	sock := filepath.Join(dir, "control.sock")
	return &SimControl{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
}

func (s *SimControl) do(ctx context.Context, method, path string, q url.Values, out any) error {
	u := "http://sim" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("sim control %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sim control %s: %s: %s", path, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// RestartAPIServer restarts the kube-apiserver in place, down at least
// down, and returns how long the API was unavailable.
func (s *SimControl) RestartAPIServer(ctx context.Context, down time.Duration) (time.Duration, error) {
	var r struct {
		Unavailable string `json:"unavailable"`
	}
	if err := s.do(ctx, http.MethodPost, "/apiserver/restart", url.Values{"down": {down.String()}}, &r); err != nil {
		return 0, err
	}
	return time.ParseDuration(r.Unavailable)
}

// Compact compacts etcd at its current revision; through the proxy every
// open watch ends and a watch from before gets 410 Gone. It returns the
// revision and the watches it ended.
func (s *SimControl) Compact(ctx context.Context) (rev, closed int64, err error) {
	var r struct {
		Revision      int64 `json:"revision"`
		ClosedWatches int64 `json:"closedWatches"`
	}
	err = s.do(ctx, http.MethodPost, "/etcd/compact", nil, &r)
	return r.Revision, r.ClosedWatches, err
}

// LoseResponses makes the proxy lose the answers of the next n writes that
// match (method "" any write; path a substring, "" any), once applied.
func (s *SimControl) LoseResponses(ctx context.Context, n int, method, path string) error {
	return s.do(ctx, http.MethodPost, "/proxy/lose", url.Values{"count": {fmt.Sprint(n)}, "method": {method}, "path": {path}}, nil)
}

// Hold holds the next request that matches at the proxy and returns once
// one is (naming it); Release lets it go.
func (s *SimControl) Hold(ctx context.Context, method, path string) (string, error) {
	var r struct {
		Held string `json:"held"`
	}
	err := s.do(ctx, http.MethodPost, "/proxy/hold", url.Values{"method": {method}, "path": {path}}, &r)
	return r.Held, err
}

// Release lets a held request go on.
func (s *SimControl) Release(ctx context.Context) error {
	return s.do(ctx, http.MethodPost, "/proxy/release", nil, nil)
}

// Mutation is a write the proxy forwarded.
type Mutation struct {
	Time   time.Time `json:"time"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Code   int       `json:"code"`
	Lost   bool      `json:"lost"`
}

// Mutations lists the writes the proxy forwarded since t.
func (s *SimControl) Mutations(ctx context.Context, since time.Time) ([]Mutation, error) {
	var out []Mutation
	err := s.do(ctx, http.MethodGet, "/proxy/mutations", url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}}, &out)
	return out, err
}

// KnobStats counts what the proxy's test-driven faults did.
type KnobStats struct {
	Lost          int `json:"lostResponses"`
	Gone          int `json:"gone410"`
	ClosedWatches int `json:"closedWatches"`
}

// Knobs returns the counts.
func (s *SimControl) Knobs(ctx context.Context) (KnobStats, error) {
	var k KnobStats
	err := s.do(ctx, http.MethodGet, "/proxy/knobs", nil, &k)
	return k, err
}
