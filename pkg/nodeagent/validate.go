package nodeagent

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

var (
	versionRE = regexp.MustCompile(`^[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}$`)
	// tt-kmd's MODULE_VERSION may carry a build suffix, which
	// /sys/module/tenstorrent/version then shows (e.g. 2.4.0-rc1).
	kmdVersionRE = regexp.MustCompile(`^[0-9]{1,6}\.[0-9]{1,6}(\.[0-9]{1,6})?(-[0-9A-Za-z][0-9A-Za-z.]{0,31})?$`)
	readbackRE   = regexp.MustCompile(`^[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}(\.[0-9]{1,6})?$`)
)

// ValidateVersion accepts MAJOR.MINOR.PATCH, the only form tt-kmd tags,
// firmware bundles and tt-smi releases use (and what the operator's CRDs
// enforce). It keeps versions safe inside paths and git refs.
func ValidateVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q must look like 1.2.3", v)
	}
	return nil
}

// ValidateKMDVersion accepts a tt-kmd version: MAJOR.MINOR.PATCH, or
// MAJOR.MINOR as tt-kmd tagged and versioned its releases before 2.0
// (ttkmd-1.34, MODULE_VERSION "1.34"), with an optional suffix as tt-kmd's
// module version carries it ("2.4.0-rc1"). The suffix is letters, digits
// and dots, safe in git refs, paths and labels.
func ValidateKMDVersion(v string) error {
	if !kmdVersionRE.MatchString(v) {
		return fmt.Errorf("version %q must look like 2.8.0 or 1.34 (or with a -suffix, as tt-kmd reports it)", v)
	}
	return nil
}

// ValidateReadbackVersion accepts a firmware readback, 3 or 4 parts
// (tt-smi reports fw_bundle_version as 19.9.0.0).
func ValidateReadbackVersion(v string) error {
	if !readbackRE.MatchString(v) {
		return fmt.Errorf("readback version %q must look like 1.2.3.4", v)
	}
	return nil
}

// ValidateSourceURL accepts https URLs, and file URLs for local mirrors and
// tests (a file:// path is only as trusted as the image it is in). Plain
// http and other schemes are refused: the payload ends up in the kernel or
// in the chips' SPI flash.
func ValidateSourceURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("URL is empty")
	}
	if strings.HasPrefix(raw, "-") || strings.ContainsAny(raw, " \t\r\n") {
		return fmt.Errorf("URL %q contains a leading dash or whitespace", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("the URL does not parse (not shown: it may hold credentials)")
	}
	if u.User != nil {
		// Credentials in a URL end up in pod specs, events and the history.
		return fmt.Errorf("URL %q carries credentials: serve the bundle from a mirror the nodes reach without them "+
			"(or a file:// path)", u.Redacted())
	}
	raw = RedactURL(raw) // a presigned URL's query is a credential too
	switch u.Scheme {
	case "https":
		if u.Host == "" {
			return fmt.Errorf("URL %q has no host", raw)
		}
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return fmt.Errorf("file URL %q must not name a host", raw)
		}
		if !strings.HasPrefix(u.Path, "/") {
			return fmt.Errorf("file URL %q must have an absolute path", raw)
		}
	default:
		return fmt.Errorf("URL %q: scheme must be https (or file for local mirrors)", raw)
	}
	return nil
}
