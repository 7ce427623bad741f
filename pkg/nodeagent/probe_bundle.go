package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/rollbook/rollbook/pkg/ttflash"
)

// BundleFacts is what the probe read from the firmware bundle the flash
// would use: its manifest's version and the boards it has images for, or
// why it could not be read. Nothing is written on the node.
type BundleFacts struct {
	// URL is the bundle's address, credentials and query redacted.
	URL     string   `json:"url"`
	Version string   `json:"version,omitempty"`
	Boards  []string `json:"boards,omitempty"`
	// Error says why the bundle could not be fetched or read, or its
	// SHA-256 is not the pin.
	Error string `json:"error,omitempty"`
}

// inspectBundle streams the bundle at raw (file:// read in place, https
// downloaded into memory only as far as the tar reader needs) through the
// SHA-256 pin, as the flash would fetch it.
func (x *execution) inspectBundle(ctx context.Context, raw, sha string) *BundleFacts {
	f := &BundleFacts{URL: RedactURL(raw)}
	body, err := x.openBundle(ctx, raw)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	defer body.Close()
	checked := newCheckedReader(io.LimitReader(body, maxBundleBytes), sha)
	b, err := ttflash.ReadBundle(checked)
	if err == nil {
		// The tar ends before the stream does: read the rest so the
		// digest covers every byte.
		_, err = io.Copy(io.Discard, checked)
	}
	var dm *digestMismatch
	switch {
	case errors.As(err, &dm):
		f.Error = "its " + dm.Error() + " (--bundle-sha256)"
	case err != nil:
		f.Error = scrubURLError(err)
	default:
		f.Version, f.Boards = b.Version, b.Boards
	}
	return f
}

func (x *execution) openBundle(ctx context.Context, raw string) (io.ReadCloser, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("the URL does not parse")
	}
	if u.Scheme == "file" {
		fi, err := os.Stat(u.Path)
		if err != nil {
			return nil, fmt.Errorf("not readable on the node: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", u.Path)
		}
		return os.Open(u.Path)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, errors.New("the request cannot be made")
	}
	resp, err := x.agent.httpClient().Do(req)
	if err != nil {
		return nil, errors.New(scrubURLError(err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	return resp.Body, nil
}
