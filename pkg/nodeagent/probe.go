package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// OpProbe measures a node without changing it.
const OpProbe Op = "probe"

// ProbeOptions says what the probe should check besides the basics.
type ProbeOptions struct {
	// KMDVersion, when set, is checked against the module cache: a miss
	// needs kernel headers and a toolchain to build it.
	KMDVersion string
	// AgentVersion is reported so the CLI can refuse a helper image of
	// another release.
	AgentVersion string
	// GitURL is where the kmd helper would clone KMDVersion's tag from;
	// default DefaultKMDGitURL.
	GitURL string
	// BundleURL, when set, is the firmware bundle a flash would use: the
	// probe reads its manifest and board images (ProbeFacts.Bundle), held
	// to BundleSHA256 when set.
	BundleURL    string
	BundleSHA256 string
}

// ProbeFacts is what a probe measured on the host (Result.Probe); device
// holders are in Result.Holders and firmware in Result.Devices.
type ProbeFacts struct {
	AgentVersion string   `json:"agentVersion,omitempty"`
	Refcnt       int      `json:"refcnt"`
	DKMS         []string `json:"dkms,omitempty"`
	Headers      bool     `json:"headers"`
	Toolchain    bool     `json:"toolchain"`
	// Cached reports the module cache holds ProbeOptions.KMDVersion for the
	// running kernel.
	Cached bool   `json:"cached,omitempty"`
	SMI    string `json:"smi,omitempty"`
	// SMIOnPath are the tt-smi files on the host's PATH, in its order,
	// with the package that owns each; SMI is the first one's version.
	SMIOnPath []HostSMI `json:"smiOnPath,omitempty"`
	// CC is the compiler the kernel headers name ("" when they name none);
	// Toolchain is false without it.
	CC string `json:"cc,omitempty"`
	// LoadRefused says why the kernel would refuse an unsigned module (""
	// when it loads one).
	LoadRefused string `json:"loadRefused,omitempty"`
	// SignatureRequired: the refusal is of unsigned modules only
	// (module.sig_enforce or lockdown), which a signed one passes.
	SignatureRequired bool `json:"signatureRequired,omitempty"`
	// Tag is the remote's tag for KMDVersion (its commit: kubectl tt pins
	// the first it sees for the whole roll), looked at unless the version
	// is loaded already and nothing needs a build.
	Tag *TagCheck `json:"tag,omitempty"`
	// PCIDevices are the Tenstorrent PCI functions present; BoundDevices
	// the cards the loaded module serves (bound, with a device node, and
	// answering). nil: not measured (an older helper).
	PCIDevices   *int `json:"pciDevices,omitempty"`
	BoundDevices int  `json:"boundDevices"`
	// PCIChips counts the Tenstorrent PCI functions present by device id
	// ("0x401e": 32): what the target tt-kmd must drive. Counts, not a
	// list: a Galaxy's 32 chips must leave the result room to fit a
	// termination message with every device's firmware.
	PCIChips map[string]int `json:"pciChips,omitempty"`
	// SilentDevices are the /dev/tenstorrent ordinals whose card does not
	// answer (its hardware init failed; see binding): not counted bound.
	SilentDevices []int `json:"silentDevices,omitempty"`
	// Kernels are the installed kernels other than the running one, which
	// the kmd helper builds for too.
	Kernels []KernelFacts `json:"kernels,omitempty"`
	// Bundle is what ProbeOptions.BundleURL holds; nil when not asked.
	Bundle *BundleFacts `json:"bundle,omitempty"`
	// LoadedSrcVersion is the loaded module's srcversion (sysfs): the
	// digest of the sources it was built from, so builds of one version
	// from two commits differ. LoadedCommit is the commit of the build
	// in the node's module cache that has it ("": none has, the module
	// was built elsewhere or from other sources).
	LoadedSrcVersion string `json:"loadedSrcVersion,omitempty"`
	LoadedCommit     string `json:"loadedCommit,omitempty"`
}

// Probe measures the running kernel, the loaded module, DKMS markers,
// headers and toolchain, the host's tt-smi, device firmware and every
// process holding /dev/tenstorrent. It changes nothing, and succeeds
// whenever it could measure: deciding what blocks an upgrade is the CLI's.
func (a *Agent) Probe(ctx context.Context, o ProbeOptions) Result {
	x := a.begin(OpProbe, o.KMDVersion)
	if o.KMDVersion != "" {
		if err := ValidateKMDVersion(o.KMDVersion); err != nil {
			return x.finish(ctx, fail(ReasonInvalidInput, "--kmd-version: %v", err))
		}
	}
	if o.GitURL == "" {
		o.GitURL = DefaultKMDGitURL
	}
	if err := ValidateSourceURL(o.GitURL); err != nil {
		return x.finish(ctx, fail(ReasonInvalidInput, "--git-url: %v", err))
	}
	if o.BundleURL != "" {
		if err := ValidateSourceURL(o.BundleURL); err != nil {
			return x.finish(ctx, fail(ReasonInvalidInput, "--bundle-url: %v", err))
		}
	}
	if err := ValidateSHA256(o.BundleSHA256); err != nil {
		return x.finish(ctx, fail(ReasonInvalidInput, "--bundle-sha256: %v", err))
	}
	return x.finish(ctx, x.probe(ctx, o))
}

// hostToolchain reports make and a gcc on the host (the build runs in a
// chroot of it); with the agent on the host itself, on PATH.
func hostToolchain(root string) bool {
	if root == "/" || root == "" {
		_, errMake := exec.LookPath("make")
		_, errGCC := exec.LookPath("gcc")
		return errMake == nil && errGCC == nil
	}
	_, errMake := os.Stat(filepath.Join(root, "usr/bin/make"))
	gcc, _ := filepath.Glob(filepath.Join(root, "usr/bin/gcc*"))
	return errMake == nil && len(gcc) > 0
}

func (x *execution) probe(ctx context.Context, o ProbeOptions) error {
	a := x.agent
	p := &ProbeFacts{AgentVersion: o.AgentVersion}
	x.res.Probe = p
	kver, err := x.readKernel()
	if err != nil {
		return err
	}
	if x.res.Before, err = readOptional(a.hostPath(filepath.Join(moduleSysfs, "version"))); err != nil {
		return err
	}
	p.Refcnt, _ = readInt(a.hostPath(filepath.Join(moduleSysfs, "refcnt")))
	if x.res.Before != "" {
		p.LoadedSrcVersion, _ = readOptional(a.hostPath(filepath.Join(moduleSysfs, "srcversion")))
		p.LoadedCommit = a.cachedCommitOf(kver, x.res.Before, p.LoadedSrcVersion)
	}
	x.res.InstallMode = InstallModeContainer
	if _, err := x.checkNotHostManaged(); err != nil {
		p.DKMS = append(p.DKMS, err.Error())
	}
	if build, err := resolveInRoot(a.Root, filepath.Join("lib/modules", kver, "build")); err == nil {
		_, err = os.Stat(filepath.Join(build, "Makefile"))
		p.Headers = err == nil
		cc := compilerFor(a.Root, build)
		p.CC, p.Toolchain = cc.CC, hostToolchain(a.Root) && cc.Have
	} else {
		p.Toolchain = hostToolchain(a.Root)
	}
	p.LoadRefused, _ = a.loadPolicy()
	p.SignatureRequired = a.signatureRequired()
	b := a.devicesBound()
	pci := len(b.present)
	p.PCIDevices, p.BoundDevices, p.SilentDevices = &pci, b.count(), b.silent
	for _, id := range b.ids {
		if p.PCIChips == nil {
			p.PCIChips = map[string]int{}
		}
		p.PCIChips[id]++
	}
	p.Kernels = a.otherKernels(kver, o.KMDVersion)
	if o.KMDVersion != "" {
		p.Cached = len(a.cacheEntries(kver, o.KMDVersion)) > 0
		if x.res.Before != o.KMDVersion || anyNeedsBuild(p.Kernels) {
			p.Tag = x.checkTag(ctx, o.GitURL, "ttkmd-"+o.KMDVersion)
		}
	}
	// The tt-smi the host runs: the first on its PATH (a package's
	// /usr/bin/tt-smi, or rollbook's /usr/local/bin/tt-smi).
	if p.SMIOnPath = a.findHostSMI(); len(p.SMIOnPath) > 0 {
		if v, err := x.hostBinaryVersion(ctx, strings.TrimPrefix(p.SMIOnPath[0].Path, "/")); err == nil {
			p.SMI = v
		} else {
			x.warn("host tt-smi %s: %v", p.SMIOnPath[0].Path, err)
		}
	}
	if x.res.Holders, err = findHolders(a.Root); err != nil {
		return err
	}
	if o.BundleURL != "" {
		p.Bundle = x.inspectBundle(ctx, o.BundleURL, o.BundleSHA256)
	}
	if x.res.Before != "" {
		devs, err := readSysfsFirmware(a.Root)
		if err != nil {
			x.warn("device firmware: %v", err)
		}
		x.res.Devices = devicesFrom(devs, nil, "")
	}
	return x.step("measure", func() (string, error) {
		s := fmt.Sprintf("kernel %s, kmd %q (refcnt %d), %d holder(s), %d device(s), %d of %d PCI device(s) served", kver,
			x.res.Before, p.Refcnt, len(x.res.Holders), len(x.res.Devices), p.BoundDevices, pci)
		if len(b.silent) > 0 {
			s += "; " + b.silentText()
		}
		return s, nil
	})
}
