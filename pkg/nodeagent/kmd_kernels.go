package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A host has more kernels installed than it runs: the one an unattended
// upgrade installed boots next. As DKMS's autoinstall does, the module is
// built and persisted for every installed kernel with headers, each against
// its own tree and compiler, so a reboot into any of them comes back with
// tt-kmd. A kernel without headers cannot be built for: it is listed (a
// warning), never a failure, since the running driver is fine.

// KernelFacts is the probe's look at an installed kernel other than the
// running one.
type KernelFacts struct {
	Release string `json:"release"`
	Headers bool   `json:"headers"`
	// CC is the compiler its headers name; Toolchain is make and that
	// compiler (or a gcc) on the host.
	CC        string `json:"cc,omitempty"`
	Toolchain bool   `json:"toolchain"`
	// Cached: the module cache holds the probed version for it; Persisted:
	// its updates/ copy is that module (a boot into it loads the version).
	Cached    bool `json:"cached,omitempty"`
	Persisted bool `json:"persisted,omitempty"`
}

// NeedsBuild reports a kernel the kmd helper would build for.
func (k KernelFacts) NeedsBuild() bool { return k.Headers && !k.Cached }

// installedKernels are the releases under /lib/modules that look installed
// (a kernel package's module tree, its index, or headers), sorted; a
// directory a removed kernel left holding only updates/ or extra/ is not one.
func installedKernels(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, "lib/modules"))
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		for _, mark := range []string{"kernel", "modules.dep", "build"} {
			if _, err := os.Lstat(filepath.Join(root, "lib/modules", e.Name(), mark)); err == nil {
				out = append(out, e.Name())
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// kernelHeaders is kver's build tree as the host resolves it, when it has
// a Makefile.
func kernelHeaders(root, kver string) (string, bool) {
	build, err := resolveInRoot(root, filepath.Join("lib/modules", kver, "build"))
	if err != nil {
		return "", false
	}
	_, err = os.Stat(filepath.Join(build, "Makefile"))
	return build, err == nil
}

// otherKernels measures every installed kernel but the running one for
// version (which may be "": headers and compiler only).
func (a *Agent) otherKernels(running, version string) []KernelFacts {
	var out []KernelFacts
	for _, k := range installedKernels(a.Root) {
		if k == running {
			continue
		}
		f := KernelFacts{Release: k}
		if build, ok := kernelHeaders(a.Root, k); ok {
			cc := compilerFor(a.Root, build)
			f.Headers, f.CC, f.Toolchain = true, cc.CC, hostToolchain(a.Root) && cc.Have
		}
		if version != "" {
			own := a.cacheEntries(k, version)
			f.Cached = len(own) > 0
			sum, err := fileHexSHA256(a.hostPath(filepath.Join("lib/modules", k, rebootSafeDir, kmdModuleFile)))
			for _, e := range own {
				f.Persisted = f.Persisted || (err == nil && sum == e.rec.SHA256)
			}
		}
		out = append(out, f)
	}
	return out
}

// persistKernels builds (or takes from the cache) and persists the module
// for every installed kernel but the running one. Failures are warnings:
// the running kernel's driver is loaded and persisted already.
func (x *execution) persistKernels(ctx context.Context, o KMDOptions) {
	a := x.agent
	var others []string
	for _, k := range installedKernels(a.Root) {
		if k != x.res.Kernel {
			others = append(others, k)
		}
	}
	if len(others) == 0 {
		return
	}
	if a.signatureRequired() {
		// Nodes never sign (the key stays with kubectl tt), and the kernel
		// would refuse an unsigned build at the next boot into them.
		x.warn("tt-kmd %s is not built for the installed kernel(s) %s: this kernel loads only signed modules, and modules are "+
			"signed only by kubectl tt for the kernel a node runs; after booting into one, run the upgrade again",
			o.Version, strings.Join(others, ", "))
		return
	}
	_ = x.step("other-kernels", func() (string, error) {
		var done, failed []string
		for _, k := range others {
			if _, ok := kernelHeaders(a.Root, k); !ok {
				x.res.NoHeaders = append(x.res.NoHeaders, k)
				continue
			}
			ko, _, err := x.obtainFor(ctx, o, k)
			if err == nil {
				_, err = x.persist(ctx, ko, k)
			}
			if err != nil {
				failed = append(failed, k)
				x.warn("tt-kmd %s is not persisted for installed kernel %s (a boot into it comes back without tt-kmd): %v", o.Version,
					k, err)
				continue
			}
			done = append(done, k)
		}
		x.res.PersistedKernels = append(x.res.PersistedKernels, done...)
		if len(x.res.NoHeaders) > 0 {
			x.warn("installed kernel(s) %s have no headers: tt-kmd %s is not built for them, and a boot into one comes back "+
				"without tt-kmd; install linux-headers-<release> (or remove the kernel) and re-run", strings.Join(x.res.NoHeaders, ", "),
				o.Version)
		}
		return fmt.Sprintf("persisted for %s; no headers: %s; failed: %s", orDash(strings.Join(done, ", ")),
			orDash(strings.Join(x.res.NoHeaders, ", ")), orDash(strings.Join(failed, ", "))), nil
	})
}

func anyNeedsBuild(ks []KernelFacts) bool {
	for _, k := range ks {
		if k.NeedsBuild() {
			return true
		}
	}
	return false
}
