package nodeagent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidateSHA256 accepts a SHA-256 digest as 64 hex digits (either case;
// sha256sum prints lower case). Empty is allowed: the pin is optional.
func ValidateSHA256(s string) error {
	if s == "" || sha256RE.MatchString(strings.ToLower(s)) {
		return nil
	}
	return fmt.Errorf("%q is not a SHA-256 digest (64 hex digits, as sha256sum prints)", s)
}

// RedactURL is raw as it may be recorded: without user info, query or
// fragment. A presigned download URL carries its signature in the query,
// and whoever reads an Event, a Lease or a log must not be able to replay it.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparseable URL, not shown)"
	}
	q := u.RawQuery != "" || u.ForceQuery
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	if q {
		return u.String() + "?REDACTED"
	}
	return u.String()
}

// errInsecureRedirect: a redirect away from https (a bundle's integrity
// would then rest on a plain-text hop).
var errInsecureRedirect = errors.New("redirect to a non-https URL refused")

// httpClient is the client of every download: it follows redirects only
// to https, and at most 10 of them, as net/http does by default.
func (a *Agent) httpClient() *http.Client {
	return &http.Client{Transport: a.Transport, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" {
			return fmt.Errorf("%w (%s)", errInsecureRedirect, RedactURL(req.URL.String()))
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}}
}

// checkedReader hashes what it reads and, at EOF, fails unless the digest
// is want: a copy that ends in that error leaves no file behind.
type checkedReader struct {
	r    io.Reader
	h    hash.Hash
	want string
}

func newCheckedReader(r io.Reader, want string) *checkedReader {
	return &checkedReader{r: r, h: sha256.New(), want: strings.ToLower(want)}
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	if err == io.EOF {
		if got := hex.EncodeToString(c.h.Sum(nil)); c.want != "" && got != c.want {
			return n, &digestMismatch{got: got, want: c.want}
		}
	}
	return n, err
}

type digestMismatch struct{ got, want string }

func (d *digestMismatch) Error() string {
	return fmt.Sprintf("SHA-256 is %s, expected %s", d.got, d.want)
}

// fileHexSHA256 is the hex SHA-256 of the file at path.
func fileHexSHA256(path string) (string, error) {
	sum, err := fileSHA256(path)
	return hex.EncodeToString(sum[:]), err
}
