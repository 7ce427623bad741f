// Package faultproxy is a TLS reverse proxy in front of the sim's
// kube-apiserver that injects the faults a busy or flaky control plane
// shows: 429 with Retry-After, 500, 503, dropped connections and slow
// responses, each request hit with probability Rate.
//
// It serves with the apiserver's own certificate (the CA the kubeconfig
// trusts) and keeps every caller's identity: a verified client certificate
// is passed on as the front-proxy headers the apiserver trusts (the way the
// aggregation layer does it), a bearer token is passed on as it is.
package faultproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Fault kinds, as counted in the stats file.
const (
	Fault429  = "429"
	Fault500  = "500"
	Fault503  = "503"
	FaultDrop = "drop"
	FaultSlow = "slow"
)

var kinds = []string{Fault429, Fault500, Fault503, FaultDrop, FaultSlow}

// StatsFile (in the sim's directory) holds {"requests":N,"faults":{kind:N}}.
const StatsFile = "api-faults.json"

// Config says where to listen, what to forward to and how often to fail.
type Config struct {
	Upstream   string // https://host:port of the apiserver
	CACert     string // CA that signs client certs and the upstream's serving cert
	ServeCert  string // cert/key the proxy serves with (trusted by the kubeconfig's CA)
	ServeKey   string
	ProxyCert  string // front-proxy client cert/key the apiserver accepts identity headers from
	ProxyKey   string
	Rate       float64 // probability that a request gets a fault, 0..1
	Seed       uint64
	StatsDir   string // where StatsFile is written ("" = not written)
	MaxSlow    time.Duration
	Logf       func(string, ...any)
	listenAddr string
}

// Proxy is a running fault proxy.
type Proxy struct {
	URL string // https://127.0.0.1:port

	cfg      Config
	srv      *http.Server
	certRP   *httputil.ReverseProxy // callers with a client certificate
	tokenRP  *httputil.ReverseProxy // everyone else (bearer tokens, anonymous)
	mu       sync.Mutex
	rng      *rand.Rand
	requests int
	faults   map[string]int
	k        knobs
}

// Start listens on a free loopback port and serves until ctx ends.
func Start(ctx context.Context, cfg Config) (*Proxy, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.MaxSlow == 0 {
		cfg.MaxSlow = 3 * time.Second
	}
	if cfg.listenAddr == "" {
		cfg.listenAddr = "127.0.0.1:0"
	}
	caPEM, err := os.ReadFile(cfg.CACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("faultproxy: no certificate in %s", cfg.CACert)
	}
	serve, err := tls.LoadX509KeyPair(cfg.ServeCert, cfg.ServeKey)
	if err != nil {
		return nil, err
	}
	front, err := tls.LoadX509KeyPair(cfg.ProxyCert, cfg.ProxyKey)
	if err != nil {
		return nil, err
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed)), faults: map[string]int{}}
	p.certRP = reverseProxy(up, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{front}, MinVersion: tls.VersionTLS12})
	p.tokenRP = reverseProxy(up, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})

	ln, err := net.Listen("tcp", cfg.listenAddr)
	if err != nil {
		return nil, err
	}
	p.URL = "https://" + ln.Addr().String()
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{serve}, ClientCAs: pool,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
	}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	go func() {
		<-ctx.Done()
		_ = p.srv.Close()
	}()
	p.writeStats()
	return p, nil
}

func reverseProxy(up *url.URL, tc *tls.Config) *httputil.ReverseProxy {
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: false, MaxIdleConnsPerHost: 64,
		IdleConnTimeout: 90 * time.Second, DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(up)
			r.Out.Host = up.Host
		},
		Transport:     tr,
		FlushInterval: -1, // watches stream
	}
}

// ServeHTTP draws a fault for the request, then forwards what is left.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Identity headers only ever come from the proxy itself.
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-remote-") {
			r.Header.Del(k)
		}
	}
	p.holdIfAsked(r)
	if p.tooOld(w, r) {
		return
	}
	kind, slow := p.draw()
	switch kind {
	case Fault429:
		status(w, http.StatusTooManyRequests, "TooManyRequests", "faultproxy: too many requests, please try again later", "1")
		return
	case Fault500:
		status(w, http.StatusInternalServerError, "InternalError", "faultproxy: an error on the server prevented the request", "")
		return
	case Fault503:
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "faultproxy: the server is currently unable to handle the request", "")
		return
	case FaultDrop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without a response
	case FaultSlow:
		select {
		case <-time.After(slow):
		case <-r.Context().Done():
			return
		}
	}
	rp := p.tokenRP
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		c := r.TLS.PeerCertificates[0]
		r.Header.Set("X-Remote-User", c.Subject.CommonName)
		for _, g := range c.Subject.Organization {
			r.Header.Add("X-Remote-Group", g)
		}
		rp = p.certRP
	}
	r, forget := p.trackWatch(r)
	defer forget()
	if p.loseThis(r) {
		// Applied whatever happens to the caller, then the answer is lost.
		d := &discard{}
		rp.ServeHTTP(d, r.WithContext(context.WithoutCancel(r.Context())))
		p.logMutation(r, d.code, true)
		p.cfg.Logf("faultproxy: lost the response (%d) of %s %s", d.code, r.Method, r.URL.Path)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	cr := &codeRecorder{ResponseWriter: w}
	rp.ServeHTTP(cr, r)
	p.logMutation(r, cr.code, false)
}

func (p *Proxy) draw() (string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	kind := ""
	var slow time.Duration
	if p.rng.Float64() < p.cfg.Rate {
		kind = kinds[p.rng.IntN(len(kinds))]
		p.faults[kind]++
		slow = time.Duration(p.rng.Int64N(int64(p.cfg.MaxSlow)))
	}
	if kind != "" || p.requests%50 == 0 {
		p.writeStatsLocked()
	}
	return kind, slow
}

func status(w http.ResponseWriter, code int, reason, msg, retryAfter string) {
	b, _ := json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg,
		"reason": reason, "code": code, "details": map[string]any{"retryAfterSeconds": 1}})
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// Stats is what the proxy did so far.
type Stats struct {
	Requests int            `json:"requests"`
	Faults   map[string]int `json:"faults"`
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := map[string]int{}
	for k, v := range p.faults {
		f[k] = v
	}
	return Stats{Requests: p.requests, Faults: f}
}

func (p *Proxy) writeStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeStatsLocked()
}

func (p *Proxy) writeStatsLocked() {
	if p.cfg.StatsDir == "" {
		return
	}
	b, _ := json.Marshal(Stats{Requests: p.requests, Faults: p.faults})
	tmp := filepath.Join(p.cfg.StatsDir, "."+StatsFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		p.cfg.Logf("faultproxy: %v", err)
		return
	}
	_ = os.Rename(tmp, filepath.Join(p.cfg.StatsDir, StatsFile))
}
