package version

import (
	"strings"
	"testing"
)

// Only an image named by digest is carried: a tag, a malformed digest or
// anything appended gives none, and the plugin then asks for --helper-image.
func TestHelperImageOnlyByDigest(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	for image, want := range map[string]string{
		"ghcr.io/rollbook/node-agent@" + d:                   "ghcr.io/rollbook/node-agent@" + d,
		"registry.example:5000/mirror/node-agent@" + d:       "registry.example:5000/mirror/node-agent@" + d,
		"ghcr.io/rollbook/node-agent:1.2.3":                  "",
		"ghcr.io/rollbook/node-agent@sha256:abc":             "",
		"ghcr.io/rollbook/node-agent:1.2.3@" + d:             "",
		"GHCR.io/rollbook/node-agent@" + d:                   "",
		"ghcr.io/rollbook/node-agent@" + d + " --privileged": "",
		"node-agent@" + d:                                    "",
		"":                                                   "",
	} {
		if got := helperImageOf(image); got != want {
			t.Errorf("helperImageOf(%q) = %q, want %q", image, got, want)
		}
	}
}

// The test binary was linked with no image: it carries none.
func TestThisBuildCarriesNoImage(t *testing.T) {
	if got := HelperImage(); got != "" {
		t.Fatalf("a test build carries helper image %q", got)
	}
}
