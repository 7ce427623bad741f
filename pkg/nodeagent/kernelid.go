package nodeagent

import (
	"os"
	"path/filepath"

	"github.com/rollbook/rollbook/pkg/kmodule"
)

// readKernel records the running kernel on the result: its release, build
// (uname -v) and config digest, what a module built here is for. A module
// is shared only between nodes that agree on all three
// (docs/tt.md, "Build once per kernel").
func (x *execution) readKernel() (string, error) {
	a := x.agent
	kver, err := readTrimmed(a.hostPath(osreleasePath))
	if err != nil || kver == "" {
		return "", fail(ReasonHostError, "cannot read kernel release from %s: %v", a.hostPath(osreleasePath), err)
	}
	x.res.Kernel = kver
	x.res.KernelBuild, _ = readOptional(a.hostPath(kversionPath))
	x.res.KernelConfig = kernelConfigDigest(a.Root, kver)
	return kver, nil
}

// kernelConfigDigest is kmodule.ConfigDigest of kver's config: the one
// its package installs in /boot, else its headers' .config, else their
// include/config/auto.conf (each gives one digest); "" when none is
// readable.
func kernelConfigDigest(root, kver string) string {
	paths := []string{filepath.Join(root, "boot", "config-"+kver)}
	if build, err := resolveInRoot(root, filepath.Join("lib/modules", kver, "build")); err == nil {
		paths = append(paths, filepath.Join(build, ".config"), filepath.Join(build, "include/config/auto.conf"))
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		d, err := kmodule.ConfigDigest(f)
		_ = f.Close()
		if err == nil && d != "" {
			return d
		}
	}
	return ""
}
