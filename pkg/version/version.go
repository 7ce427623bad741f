// Package version reports what build of rollbook is running, and the
// node-agent image that build was released with.
package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
)

// Set by the release build with -ldflags "-X github.com/rollbook/rollbook/pkg/version.version=v1.2.3 …"
// (.goreleaser.yaml); helperImage is the node-agent image the release
// built and pushed, by digest (ghcr.io/rollbook/node-agent@sha256:…).
var (
	version     = ""
	commit      = ""
	helperImage = ""
)

// The one platform the release builds the node-agent image for: its
// rootfs is Debian amd64 packages (internal/nodeimage pins them).
const (
	HelperOS   = "linux"
	HelperArch = "amd64"
)

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	// HelperImage is the node-agent image the build was released with, by
	// digest; empty for a build that carries none.
	HelperImage string `json:"helperImage,omitempty"`
}

// Get fills Info from link-time values, falling back to the module build
// info, so `go install …@v1.2.3` reports v1.2.3 without ldflags.
func Get() Info {
	i := Info{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && i.Commit == "" {
				i.Commit = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	i.HelperImage = helperImageOf(helperImage)
	return i
}

// digestRef is an image by digest; the repository as the reference
// grammar allows it (lower case, host[:port]/path).
var digestRef = regexp.MustCompile(`^[a-z0-9]+([.-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+@sha256:[0-9a-f]{64}$`)

// HelperImage is the node-agent image this build was released with, by
// digest: the plugins' default --helper-image. A release stamps it (the
// image it built and pushed); a build that carries none — `make build`,
// `go install`, a pseudo-version (v0.0.0-2026…-<sha>) — returns "" and
// must be told which image to run: never a tag that may not exist, or may
// move.
func HelperImage() string { return Get().HelperImage }

// helperImageOf is the stamped image when it is a reference by digest;
// anything else stamped is ignored, never run.
func helperImageOf(image string) string {
	if !digestRef.MatchString(image) {
		return ""
	}
	return image
}
