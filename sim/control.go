package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/faultproxy"
)

// ControlSocket (in the sim's directory) takes the faults a test injects
// at a moment of its choosing, as HTTP over a unix socket (root only:
// mode 0600):
//
//	POST /apiserver/restart?down=2s   restart the kube-apiserver in place (down at least that long)
//	POST /etcd/compact                compact etcd; through the proxy, open watches end and older ones get 410
//	POST /proxy/lose?count=N&method=M&path=P   lose the answers of the next N matching writes, once applied
//	POST /proxy/hold?method=M&path=P  hold the next matching request; answers once one is held
//	POST /proxy/release               let it go
//	GET  /proxy/mutations?since=RFC3339Nano    writes the proxy forwarded since then
//	GET  /proxy/knobs                 what the knobs did
//
// The /proxy/ ones and the watches' 410 need the fault proxy (--api-faults
// or --api-proxy): DIR/kubeconfig goes through it.
const ControlSocket = "control.sock"

func serveControl(ctx context.Context, dir string, c *cluster.Cluster, p *faultproxy.Proxy, logf func(string, ...any)) error {
	path := filepath.Join(dir, ControlSocket)
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return err
	}
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			v = map[string]string{"error": err.Error()}
		}
		_ = json.NewEncoder(w).Encode(v)
	}
	needProxy := func(w http.ResponseWriter) bool {
		if p == nil {
			reply(w, nil, errors.New("no fault proxy: start the sim with --api-faults or --api-proxy"))
			return false
		}
		return true
	}
	match := func(r *http.Request) faultproxy.Match {
		return faultproxy.Match{Method: r.URL.Query().Get("method"), Path: r.URL.Query().Get("path")}
	}
	mux.HandleFunc("POST /apiserver/restart", func(w http.ResponseWriter, r *http.Request) {
		down, _ := time.ParseDuration(r.URL.Query().Get("down"))
		logf("control: restarting the kube-apiserver (down at least %s)", down)
		took, err := c.RestartAPIServer(r.Context(), down)
		reply(w, map[string]string{"unavailable": took.String()}, err)
	})
	mux.HandleFunc("POST /etcd/compact", func(w http.ResponseWriter, r *http.Request) {
		rev, err := c.CompactEtcd(r.Context())
		closed := 0
		if err == nil && p != nil {
			closed = p.Compact(rev)
		}
		logf("control: etcd compacted at revision %d; %d watch(es) through the proxy ended", rev, closed)
		reply(w, map[string]int64{"revision": rev, "closedWatches": int64(closed)}, err)
	})
	mux.HandleFunc("POST /proxy/lose", func(w http.ResponseWriter, r *http.Request) {
		if !needProxy(w) {
			return
		}
		n, err := strconv.Atoi(r.URL.Query().Get("count"))
		if err == nil {
			p.LoseResponses(n, match(r))
		}
		reply(w, map[string]int{"count": n}, err)
	})
	mux.HandleFunc("POST /proxy/hold", func(w http.ResponseWriter, r *http.Request) {
		if !needProxy(w) {
			return
		}
		req, err := p.Hold(r.Context(), match(r))
		reply(w, map[string]string{"held": req}, err)
	})
	mux.HandleFunc("POST /proxy/release", func(w http.ResponseWriter, _ *http.Request) {
		if !needProxy(w) {
			return
		}
		p.Release()
		reply(w, map[string]bool{"released": true}, nil)
	})
	mux.HandleFunc("GET /proxy/mutations", func(w http.ResponseWriter, r *http.Request) {
		if !needProxy(w) {
			return
		}
		since, err := time.Parse(time.RFC3339Nano, r.URL.Query().Get("since"))
		reply(w, p.Mutations(since), err)
	})
	mux.HandleFunc("GET /proxy/knobs", func(w http.ResponseWriter, _ *http.Request) {
		if !needProxy(w) {
			return
		}
		reply(w, p.Knobs(), nil)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = os.Remove(path)
	}()
	return nil
}
