// Package apicount counts the API requests of the in-process CLI by verb
// and resource, for tests and benchmarks that hold rollbook to a request
// budget and must say where the requests went when it is exceeded.
package apicount

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rollbook/rollbook/internal/httpcount"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/paced"
)

// Counter counts requests by "VERB resource". Permission checks
// (SelfSubjectAccessReviews) are counted apart: once per run whatever the
// fleet size. So are paced requests (paced.Mark: Lease renewals, step
// clocks, the journal's timed batches), a cost per second of the run that an
// instantly acting cluster would not see; they are listed in Breakdown.
type Counter struct {
	mu        sync.Mutex
	total     int
	preflight int
	paced     map[string]int
	by        map[string]int
	paths     []string
	// conflicts are writes the server refused 409 Conflict: another
	// writer (the sim's kubelets, controllers) changed the object first.
	conflicts map[string]int
}

// Start wraps the CLI's transport (cli.WrapTransport) until the returned
// stop is called. Not for parallel tests: the hook is global.
func Start() (*Counter, func()) {
	rc := &Counter{by: map[string]int{}, paced: map[string]int{}, conflicts: map[string]int{}}
	cli.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return httpcount.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			rc.add(r)
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusConflict {
				rc.mu.Lock()
				rc.conflicts[requestKey(r)]++
				rc.mu.Unlock()
			}
			return resp, err
		})
	}
	return rc, func() { cli.WrapTransport = nil }
}

func (rc *Counter) add(r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews") {
		rc.preflight++
		return
	}
	key := requestKey(r)
	if paced.Is(r.Context()) {
		rc.paced[key]++
		return
	}
	rc.total++
	rc.by[key]++
	rc.paths = append(rc.paths, time.Now().Format("15:04:05.000")+" "+r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
}

// requestKey is "VERB resource[/subresource]", with list and watch told
// apart from get.
func requestKey(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	if len(parts) > 0 && parts[0] == "apis" && len(parts) >= 3 {
		parts = parts[3:]
	} else if len(parts) >= 2 {
		parts = parts[2:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	resource, named := "", false
	switch len(parts) {
	case 0:
	case 1:
		resource = parts[0]
	case 2:
		resource, named = parts[0], true
	default:
		resource, named = parts[0]+"/"+parts[2], true
	}
	verb := r.Method
	switch {
	case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case r.Method == http.MethodGet && !named:
		verb = "LIST"
	}
	return verb + " " + resource
}

// Total is the number of requests counted, permission checks aside.
func (rc *Counter) Total() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.total
}

// Breakdown prints the counts, biggest first.
func (rc *Counter) Breakdown() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	keys := make([]string, 0, len(rc.by))
	for k := range rc.by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if rc.by[keys[i]] != rc.by[keys[j]] {
			return rc.by[keys[i]] > rc.by[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests (+%d permission checks, +%d paced):\n", rc.total, rc.preflight, rc.pacedTotal())
	for _, k := range keys {
		fmt.Fprintf(&b, "  %4d  %s\n", rc.by[k], k)
	}
	for k, n := range rc.paced {
		fmt.Fprintf(&b, "  (%d  %s, paced)\n", n, k)
	}
	for k, n := range rc.conflicts {
		fmt.Fprintf(&b, "  [%d  %s refused 409 Conflict]\n", n, k)
	}
	return b.String()
}

// Conflicts is the number of requests the server refused 409 Conflict
// (paced ones included): each costs its retry a read and the write again.
func (rc *Counter) Conflicts() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, v := range rc.conflicts {
		n += v
	}
	return n
}

// Paths lists every request in order, each with its time (a cost per
// second of waiting shows as a request that recurs).
func (rc *Counter) Paths() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return strings.Join(rc.paths, "\n")
}

// Paced is the number of paced requests counted apart (paced.Mark).
func (rc *Counter) Paced() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.pacedTotal()
}

func (rc *Counter) pacedTotal() int {
	n := 0
	for _, v := range rc.paced {
		n += v
	}
	return n
}

// Preflight is the number of permission checks counted apart.
func (rc *Counter) Preflight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.preflight
}
