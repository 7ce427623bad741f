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
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// bundleServer serves a 19.9.0 bundle over TLS at /fw, and returns its
// SHA-256 and the agent trusting the server.
func bundleServer(t *testing.T, mux *http.ServeMux) (*httptest.Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.fwbundle")
	require.NoError(t, fakehost.WriteBundle(path, "19.9.0"))
	body := readFile(t, path)
	sum := sha256.Sum256(body)
	mux.HandleFunc("/fw", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv, hex.EncodeToString(sum[:])
}

func httpsFlash(t *testing.T, srv *httptest.Server, url, sum string) (nodeagent.Result, string, string) {
	t.Helper()
	a, root := flashHost(t, fakehost.Spec{})
	a.Transport = srv.Client().Transport
	o := flashOpts(t, "19.9.0")
	o.BundleURL, o.BundleSHA256, o.WorkDir = url, sum, t.TempDir()
	return a.Flash(context.Background(), o), root, o.WorkDir
}

func TestFlashVerifiesTheBundleChecksum(t *testing.T) {
	srv, sum := bundleServer(t, http.NewServeMux())
	t.Run("matching download flashes", func(t *testing.T) {
		r, root, _ := httpsFlash(t, srv, srv.URL+"/fw", strings.ToUpper(sum))
		requireSuccess(t, r)
		assert.Len(t, callsTo(t, root, "tt-flash"), 1)
	})
	wrong := strings.Repeat("ab", 32)
	t.Run("mismatching download writes and flashes nothing", func(t *testing.T) {
		r, root, work := httpsFlash(t, srv, srv.URL+"/fw", wrong)
		requireFailure(t, r, nodeagent.ReasonBundleChecksumMismatch)
		assert.Contains(t, r.Error.Message, "expected "+wrong)
		assert.Contains(t, r.Error.Message, sum, "the message names the digest it got")
		assert.Empty(t, callsTo(t, root, "tt-flash"))
		left, err := os.ReadDir(work)
		require.NoError(t, err)
		assert.Empty(t, left, "no bundle file, not even a temporary one")
		assert.Equal(t, []string{"18.2.0.0", "18.2.0.0"}, observe(t, root).Firmware)
	})
	t.Run("mismatching local file is refused", func(t *testing.T) {
		a, root := flashHost(t, fakehost.Spec{})
		o := flashOpts(t, "19.9.0")
		o.BundleSHA256 = wrong
		r := a.Flash(context.Background(), o)
		requireFailure(t, r, nodeagent.ReasonBundleChecksumMismatch)
		assert.Empty(t, callsTo(t, root, "tt-flash"))
	})
	t.Run("a malformed pin is invalid input", func(t *testing.T) {
		a, root := flashHost(t, fakehost.Spec{})
		o := flashOpts(t, "19.9.0")
		o.BundleSHA256 = "abc"
		requireFailure(t, a.Flash(context.Background(), o), nodeagent.ReasonInvalidInput)
		assert.Empty(t, toolNames(t, root), "refused before any tool ran")
	})
}

// An https URL that redirects to plain http is refused by the client
// itself: the plain server is never asked.
func TestFlashRefusesARedirectToHTTP(t *testing.T) {
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { plainHits.Add(1) }))
	t.Cleanup(plain.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/fw?X-Amz-Signature=leak", http.StatusFound)
	})
	mux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/fw", http.StatusFound) })
	srv, sum := bundleServer(t, mux)

	r, root, _ := httpsFlash(t, srv, srv.URL+"/moved", "")
	requireFailure(t, r, nodeagent.ReasonBundleFetchFailed)
	assert.Contains(t, r.Error.Message, "redirect to a non-https URL refused")
	assert.NotContains(t, r.Error.Message, "leak", "the redirect's query is not echoed")
	assert.Zero(t, plainHits.Load())
	assert.Empty(t, callsTo(t, root, "tt-flash"))

	r, _, _ = httpsFlash(t, srv, srv.URL+"/hop", sum)
	requireSuccess(t, r)
}

// A presigned URL's query string is the credential: it appears in no
// step, warning or error of the result.
func TestFlashRecordsNoQueryString(t *testing.T) {
	srv, _ := bundleServer(t, http.NewServeMux())
	const sig = "X-Amz-Signature=deadbeefcafe"
	for _, path := range []string{"/fw?", "/missing?"} {
		r, _, _ := httpsFlash(t, srv, srv.URL+path+sig, "")
		out := readAll(t, r)
		assert.NotContains(t, out, "deadbeefcafe", "result of %s", path)
		assert.Contains(t, out, srv.URL+strings.TrimSuffix(path, "?")+"?REDACTED")
	}
}

func readAll(t *testing.T, r nodeagent.Result) string {
	t.Helper()
	var b strings.Builder
	for _, s := range r.Steps {
		b.WriteString(s.Detail + "\n")
	}
	b.WriteString(strings.Join(r.Warnings, "\n"))
	if r.Error != nil {
		b.WriteString(r.Error.Message)
	}
	return b.String()
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://h/p/fw.tar?X-Amz-Signature=s&X-Amz-Credential=c": "https://h/p/fw.tar?REDACTED",
		"https://u:pw@h/fw.tar#frag":                              "https://h/fw.tar",
		"file:///srv/fw.tar":                                      "file:///srv/fw.tar",
	} {
		assert.Equal(t, want, nodeagent.RedactURL(in), in)
	}
}
