// Package nodeagent is the code that runs inside a rollbook helper pod on a
// Tenstorrent node: it upgrades tt-kmd, replaces the host's tt-smi and
// flashes device firmware, reproducing the node-side sequence of
// tt-k8s-driver-manager over a host root directory and external tools on
// PATH. Every operation returns a Result that the CLI reads back from the
// pod's termination message.
package nodeagent

import "time"

// Op names an operation.
type Op string

// Operations.
const (
	OpKMD Op = "kmd"
	// OpKMDBuild builds the module once per kernel, for kubectl tt to
	// check, sign and share; it loads nothing.
	OpKMDBuild Op = "kmd-build"
	OpSMI      Op = "smi"
	OpFlash    Op = "flash"
)

// Reason is a stable, machine-readable failure code.
type Reason string

// Failure reasons. They are part of the CLI contract: add, never rename.
const (
	ReasonInvalidInput      Reason = "InvalidInput"
	ReasonHostManaged       Reason = "HostManagedKMD"
	ReasonDeviceInUse       Reason = "DeviceInUse"
	ReasonHoldersNotVisible Reason = "HoldersNotVisible"
	ReasonHoldersRemain     Reason = "HoldersRemain"
	ReasonNoKernelHeaders   Reason = "NoKernelHeaders"
	ReasonCloneFailed       Reason = "CloneFailed"
	// ReasonCommitMismatch: the tt-kmd tag resolves to another commit
	// than the --commit pin; nothing was built.
	ReasonCommitMismatch   Reason = "CommitMismatch"
	ReasonBuildFailed      Reason = "BuildFailed"
	ReasonRmmodFailed      Reason = "RmmodFailed"
	ReasonInsmodFailed     Reason = "InsmodFailed"
	ReasonVersionMismatch  Reason = "VersionMismatch"
	ReasonSMISourceInvalid Reason = "SMISourceInvalid"
	ReasonSMIInstallFailed Reason = "SMIInstallFailed"
	// ReasonSMIPackaged: a package manager owns a tt-smi on the host's
	// PATH, which rollbook's copy would shadow or overwrite; nothing was
	// written.
	ReasonSMIPackaged Reason = "SMIPackaged"
	// ReasonSMIHostIncompatible: the image's tt-smi does not run with the
	// host's libc (a flavour built for a newer OS release).
	ReasonSMIHostIncompatible Reason = "SMIHostIncompatible"
	ReasonReadbackFailed      Reason = "ReadbackFailed"
	ReasonBundleFetchFailed   Reason = "BundleFetchFailed"
	// ReasonBundleChecksumMismatch: the bundle's SHA-256 is not the
	// --bundle-sha256 pin; nothing was flashed.
	ReasonBundleChecksumMismatch Reason = "BundleChecksumMismatch"
	ReasonFlashFailed            Reason = "FlashFailed"
	// ReasonFlashNeedsPerson: tt-flash could not write a chip's SPI (its
	// second verification failed) and says not to reset or power off the
	// board but to contact support (ttflash.FailureSource). Nothing was
	// reset; no later run may touch the node until a person says so.
	ReasonFlashNeedsPerson Reason = "FlashNeedsPerson"
	ReasonConfigSpaceReset Reason = "ConfigSpaceResetNotCompleted"
	ReasonFirmwareMismatch Reason = "FirmwareMismatch"
	// ReasonDeviceSilent: after the flash's reset a card does not answer
	// (no firmware version from tt-smi or sysfs, also after a second
	// reset). It needs a person to power-cycle the host; no run flashes
	// it again.
	ReasonDeviceSilent Reason = "DeviceSilentAfterFlash"
	// ReasonMajorDowngrade: a chip runs a newer major version than the
	// bundle and no --allow-major-downgrade was given; nothing was flashed.
	ReasonMajorDowngrade Reason = "MajorDowngradeRefused"
	// ReasonNeedsForce: a chip is in a case tt-flash refuses without
	// --force (an upgrade across more than one major, no running version)
	// and no --force-write was given; nothing was flashed.
	ReasonNeedsForce    Reason = "ForceNeeded"
	ReasonDeviceMissing Reason = "DeviceMissing"
	ReasonToolMissing   Reason = "ToolMissing"
	ReasonTimeout       Reason = "Timeout"
	ReasonHostError     Reason = "HostError"
	// ReasonSigningFailed: a node could not sign a module (helpers of
	// older releases; nodes no longer sign).
	ReasonSigningFailed Reason = "SigningFailed"
	// ReasonDevicesUnbound: the new module loaded but bound fewer of the
	// node's Tenstorrent PCI devices than are present (Result.Restored says
	// whether the previous module was put back).
	ReasonDevicesUnbound Reason = "DevicesUnbound"
	// ReasonModuleNotVouched: the module the kmd helper was given is not
	// the one kubectl tt vouched for (its SHA-256, what it is, or its
	// signature); nothing was unloaded.
	ReasonModuleNotVouched Reason = "ModuleNotVouched"
)

// Install modes, as in the driver.tenstorrent.com/install-mode node label.
const (
	InstallModeContainer = "container"
	InstallModeHost      = "host"
)

// Result is the outcome of one operation, written as the helper pod's
// termination message. Success says whether the node is now in the
// requested state; Changed says whether this run altered the node.
type Result struct {
	Op      Op     `json:"op"`
	Node    string `json:"node,omitempty"`
	Success bool   `json:"success"`
	Changed bool   `json:"changed"`
	// Target is the requested version (the readback version for flash).
	Target string `json:"target,omitempty"`
	// Before and After are the measured versions (kmd: /sys/module; smi:
	// tt-smi --version). Flash reports per device instead.
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`

	Kernel string `json:"kernel,omitempty"`
	// KernelBuild is the running kernel's build (uname -v): with Kernel,
	// what a module built here is for (kmd, kmd-build, probe).
	KernelBuild string `json:"kernelBuild,omitempty"`
	// KernelConfig is the running kernel's config digest
	// (kmodule.ConfigDigest): kernels of one release and build may differ
	// in it, and a module built for one is refused by the other.
	KernelConfig string `json:"kernelConfig,omitempty"`
	InstallMode  string `json:"installMode,omitempty"`
	CacheHit     *bool  `json:"cacheHit,omitempty"`
	// Commit is the tt-kmd commit the module was built from (kmd).
	Commit    string `json:"commit,omitempty"`
	Persisted bool   `json:"persisted,omitempty"`
	// PersistedKernels are the installed kernels whose boot loads this
	// version (the running one when Persisted, and every other kernel with
	// headers it was built for); NoHeaders the installed kernels it could
	// not be built for (kmd).
	PersistedKernels []string `json:"persistedKernels,omitempty"`
	NoHeaders        []string `json:"noHeaders,omitempty"`
	// Module is the module the kmd helper loaded and where it came from.
	Module *ModuleInfo `json:"module,omitempty"`
	// Restored is the version the kmd helper put back and verified after
	// the new module failed its verify (it bound fewer cards).
	Restored string `json:"restored,omitempty"`

	Holders        []Holder `json:"holders,omitempty"`
	HoldersOmitted int      `json:"holdersOmitted,omitempty"`
	Devices        []Device `json:"devices,omitempty"`
	DevicesOmitted int      `json:"devicesOmitted,omitempty"`

	// Probe is set by the probe operation.
	Probe *ProbeFacts `json:"probe,omitempty"`

	Steps      []Step   `json:"steps,omitempty"`
	Warnings   []string `json:"warnings,omitempty"`
	OutputTail string   `json:"outputTail,omitempty"`
	Error      *Failure `json:"error,omitempty"`
	// Truncated is set when fields were shortened to fit the kubelet's
	// termination-message limit.
	Truncated bool `json:"truncated,omitempty"`

	StartedAt  time.Time `json:"startedAt"`
	DurationMS int64     `json:"durationMs"`
}

// Holder is a process that had a /dev/tenstorrent device open.
type Holder struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm,omitempty"`
	// Via is how: HeldByFD, HeldByDmaBuf or HeldByMmap ("" from an older
	// helper: an fd).
	Via         string `json:"via,omitempty"`
	PodUID      string `json:"podUID,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	Killed      bool   `json:"killed,omitempty"`
}

// Device is one Tenstorrent chip's firmware before and after a flash.
type Device struct {
	Index  int    `json:"index"`
	BusID  string `json:"bus,omitempty"`
	Board  string `json:"board,omitempty"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// OK is true when After equals the target readback.
	OK bool `json:"ok"`
}

// Step is one named stage of an operation, in execution order.
type Step struct {
	Name   string `json:"name"`
	MS     int64  `json:"ms"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Failure explains why Success is false.
type Failure struct {
	Reason  Reason `json:"reason"`
	Message string `json:"message"`
}
