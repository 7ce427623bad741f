//go:build e2e

package fleet

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
)

// resourceOf shortens an API path to its resource (and subresource):
// /api/v1/namespaces/x/pods/y/eviction → pods/eviction.
func resourceOf(path string) string {
	p := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(p) >= 2 && p[0] == "api":
		p = p[2:]
	case len(p) >= 3 && p[0] == "apis":
		p = p[3:]
	default:
		return path
	}
	if len(p) > 2 && p[0] == "namespaces" {
		p = p[2:]
	}
	switch len(p) {
	case 0:
		return path
	case 1, 2:
		return p[0]
	default:
		return p[0] + "/" + p[2]
	}
}

func breakdown(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s×%d ", k, m[k])
	}
	return b.String()
}

// trace appends r to the file ROLLBOOK_COST_TRACE names, if set: method,
// path and query, and the start of a write's body.
func trace(r *http.Request) {
	name := os.Getenv("ROLLBOOK_COST_TRACE")
	if name == "" {
		return
	}
	line := r.Method + " " + r.URL.RequestURI()
	if r.Body != nil && r.GetBody != nil {
		if b, err := r.GetBody(); err == nil {
			body, _ := io.ReadAll(b)
			body = bytes.ReplaceAll(body, []byte("\n"), nil)
			if len(body) > 400 {
				body = body[:400]
			}
			line += " " + string(body)
		}
	}
	f, err := os.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}
