package tt

import (
	"fmt"

	"github.com/rollbook/rollbook/pkg/version"
)

// NoHelperImage says why a helper cannot start without --helper-image:
// this build carries no node-agent image (only a release stamps the one it
// built, by digest), and how to name one.
func NoHelperImage() string {
	return fmt.Sprintf("--helper-image is not set, and this build (%s) carries no node-agent image: only a release "+
		"is built with the image it pushed. Pass --helper-image IMAGE@sha256:DIGEST (or set $ROLLBOOK_HELPER_IMAGE): "+
		"ghcr.io/rollbook/node-agent by the digest in a release's digests.txt, your mirror of it, or the image `make image` "+
		"printed", version.Get().Version)
}
