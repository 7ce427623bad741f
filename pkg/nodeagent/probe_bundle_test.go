package nodeagent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The probe reads the bundle the flash would use (file:// in place, https
// streamed), through the SHA-256 pin, and records what it holds or why it
// cannot be used; it succeeds either way (deciding is the CLI's).
func TestProbeReadsTheBundle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fw_pack-19.9.0.fwbundle")
	require.NoError(t, fakehost.WriteBundleFor(path, "19.9.0", "n150", "n300"))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	pin := hex.EncodeToString(sum[:])
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fw.fwbundle" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(raw)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name, url, sha string
		version        string // "" = an error is recorded
		errHas         string
	}{
		{name: "file", url: "file://" + path, sha: pin, version: "19.9.0.0"},
		{name: "https", url: srv.URL + "/fw.fwbundle", sha: pin, version: "19.9.0.0"},
		{name: "typo", url: "file://" + path + ".typo", errHas: "not readable on the node"},
		{name: "https 404", url: srv.URL + "/nope", errHas: "HTTP 404"},
		{name: "not the pin", url: "file://" + path, sha: strings.Repeat("ab", 32), errHas: "expected " + strings.Repeat("ab", 32)},
		{name: "not the pin over https", url: srv.URL + "/fw.fwbundle", sha: strings.Repeat("ab", 32), errHas: "--bundle-sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := flashHost(t, fakehost.Spec{})
			a.Transport = srv.Client().Transport
			r := a.Probe(context.Background(), nodeagent.ProbeOptions{BundleURL: tc.url, BundleSHA256: tc.sha})
			requireSuccess(t, r)
			require.NotNil(t, r.Probe.Bundle)
			b := r.Probe.Bundle
			if tc.version == "" {
				assert.Contains(t, b.Error, tc.errHas)
				assert.Empty(t, b.Version)
				return
			}
			assert.Empty(t, b.Error)
			assert.Equal(t, tc.version, b.Version)
			assert.Equal(t, []string{"NEBULA_X1", "NEBULA_X2"}, b.Boards)
		})
	}
}
