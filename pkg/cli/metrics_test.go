package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollbook/rollbook/pkg/runbook"
	"github.com/rollbook/rollbook/pkg/ui"
)

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want Prometheus's text format", ct)
	}
	return string(b)
}

func wantLines(t *testing.T, when, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, "\n"+l+"\n") && !strings.HasPrefix(body, l+"\n") {
			t.Errorf("%s: no line %q in:\n%s", when, l, body)
		}
	}
}

// A run with --metrics-bind-address serves its progress while it runs,
// scraped over HTTP: two nodes in progress mid-run, then every node done
// with each step's durations, and nothing once the session ends.
func TestTheRunServesItsProgressAsMetrics(t *testing.T) {
	var out bytes.Buffer
	s := &Session{plugin: "tt", RunID: "20261207-080000-abcdef", Progress: ui.NewProgress(&out)}
	o := runbook.Options{Parallel: 2}
	if err := s.applyMetrics(&o, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	addr := s.metrics.addr
	if !strings.Contains(out.String(), "http://"+addr+"/metrics") {
		t.Errorf("the run does not say where it serves its metrics:\n%s", out.String())
	}
	// As Session.options does: the progress reporter wraps the others.
	pr := &progressReporter{Reporter: o.Reporter, started: time.Now(), p: RunProgress{Run: s.RunID, Total: 4, Parallel: 2}}
	s.metrics.progress.Store(pr)
	o.Reporter = pr

	release := make(chan struct{})
	var working sync.WaitGroup
	working.Add(2)
	m := &memRoll{state: map[string]string{}}
	rb := m.runbook(0)
	act := rb.Steps[1].Act
	var once sync.Map
	rb.Steps[1].Act = func(ctx context.Context, f string) error {
		if _, seen := once.LoadOrStore(f, true); !seen && (strings.HasPrefix(f, "n0") || strings.HasPrefix(f, "n1")) {
			working.Done()
			<-release // the first two nodes hold their slots until scraped
		}
		return act(ctx, f)
	}
	var targets []runbook.Target
	for i := range 4 {
		targets = append(targets, runbook.ScopeTarget{Scope: fmt.Sprintf("n%d", i)})
	}
	done := make(chan runbook.Result)
	go func() { done <- runbook.Run(context.Background(), rb, targets, o) }()
	working.Wait()
	wantLines(t, "mid-run", scrape(t, addr), `rollbook_run_info{plugin="tt",run="20261207-080000-abcdef"} 1`,
		"rollbook_nodes_total 4", "rollbook_nodes_done 0", "rollbook_nodes_in_progress 2", "rollbook_run_ended 0")
	close(release)
	res := <-done
	if res.Outcome != runbook.OutcomeDone {
		t.Fatalf("outcome %s", res.Outcome)
	}
	s.recordOutcome(res.Outcome)
	body := scrape(t, addr)
	wantLines(t, "after the run", body, "rollbook_nodes_done 4", "rollbook_nodes_stopped 0", "rollbook_nodes_in_progress 0",
		"rollbook_eta_seconds 0", "rollbook_run_ended 1", `rollbook_run_outcome{outcome="done"} 1`,
		`rollbook_step_duration_seconds_count{step="cordon"} 4`, `rollbook_step_duration_seconds_count{step="work"} 4`)
	s.closeMetrics()
	s.Progress.Close()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the endpoint still listens after the session ended")
	}
}

func TestMetricsBindAddressIsCheckedBeforeTheRun(t *testing.T) {
	for _, a := range []string{"", "0", ":9400", "127.0.0.1:0", "[::1]:9400"} {
		if err := validMetricsAddr(a); err != nil {
			t.Errorf("%q refused: %v", a, err)
		}
	}
	for _, a := range []string{"9400", "localhost", ":http", ":70000", "host:-1"} {
		if err := validMetricsAddr(a); err == nil {
			t.Errorf("%q accepted", a)
		}
	}
	// An address in use stops the command before anything acts.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out bytes.Buffer
	s := &Session{plugin: "ate", Progress: ui.NewProgress(&out)}
	defer s.Progress.Close()
	if err := s.applyMetrics(&runbook.Options{}, ln.Addr().String()); err == nil || !strings.Contains(err.Error(),
		"--metrics-bind-address") {
		t.Errorf("an address in use: %v, want the flag named", err)
	}
}
