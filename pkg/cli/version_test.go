package cli

import (
	"strings"
	"testing"
)

// The supported range's edges, per plugin: below the oldest is a warning
// naming the minimum, above the newest tested one naming it, a server
// string that is no version says so.
func TestSupportWarnings(t *testing.T) {
	for _, c := range []struct {
		plugin, server, want string
	}{
		{"tt", "v1.30.0", ""},
		{"tt", "v1.29.14", "older than kubectl-tt supports (1.30 or newer)"},
		{"ate", "v1.32.3", "older than kubectl-ate supports (1.33 or newer)"},
		{"ate", "v1.33.0-eks-1234", ""},
		{"tt", "v1.37.2", ""},
		{"tt", "v1.38.0-alpha.1", "newer than any kubectl-tt was tested on (1.37)"},
		{"ate", "v2.0.0", "newer than any"},
		{"tt", "not-a-version", "not a Kubernetes version"},
	} {
		got := strings.Join(supportWarnings(c.plugin, c.server), "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s on %s: %q, want %q", c.plugin, c.server, got, c.want)
		}
	}
}
