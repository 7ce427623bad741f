package fleet

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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
