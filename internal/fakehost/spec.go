// Package fakehost lays out a fake Tenstorrent node under a directory and
// provides fake versions of the node tools (rmmod, insmod, tt-smi, tt-flash, …)
// that act only on that directory. It lets the node agent and the simulator
// run the real node-side sequence without a kernel, devices or root.
package fakehost

import (
	"strings"
	"time"

	"github.com/rollbook/rollbook/pkg/ttkmd"
)

// Spec describes the fake host to create. Zero values give a healthy PCIe
// Wormhole node with two devices, kmd 1.31.0 loaded and no holders.
type Spec struct {
	// Kernel is the running kernel release (uname -r); default DefaultKernel.
	Kernel string
	// KernelBuild is the running kernel's build (uname -v,
	// /proc/sys/kernel/version); default KernelBuildOf(Kernel).
	KernelBuild string
	// LoadedKMD is the tt-kmd version in /sys/module/tenstorrent/version;
	// "" means the module is not loaded.
	LoadedKMD string
	// Refcnt overrides the module refcount; nil means "one per holder fd".
	// Set it above the holder count to model holders the agent cannot see
	// (a helper pod without hostPID).
	Refcnt *int
	// Holders are processes with /dev/tenstorrent/* open.
	Holders []Holder
	// Devices are the Tenstorrent PCI devices; nil means two PCIe n150 cards
	// at firmware 18.2.0.0.
	Devices []Device
	// KernelHeaders creates /lib/modules/<kernel>/build (a symlink into
	// /usr/src, as on Ubuntu) with a Makefile.
	KernelHeaders bool
	// DebianHeaders lays the build tree out as Debian does: the
	// arch-specific tree's Makefile includes the common tree by absolute
	// path, so it builds only with paths as the host sees them.
	DebianHeaders bool
	// UbuntuHWEHeaders lays the build tree out as an Ubuntu 22.04 HWE
	// kernel's: the compiler it was built with (x86_64-linux-gnu-gcc-12)
	// named in its config only, and the host's default gcc is gcc-11.
	UbuntuHWEHeaders bool
	// KernelConfig are assignments (CONFIG_X=value) the kernel's config
	// has besides the defaults: hosts of one release and build that differ
	// here run kernels whose loaders refuse each other's modules.
	KernelConfig []string
	// NoToolchain leaves the host without make and gcc (a headers package
	// alone does not pull in build-essential).
	NoToolchain bool
	// RebootedInto, when set, models a host that got its module on Kernel
	// and then rebooted into this kernel: processes gone, the module not
	// loaded (nothing persisted it for the new kernel), headers for the new
	// kernel only with KernelHeaders.
	RebootedInto string
	// InstalledKernels are kernels installed besides Kernel (the next boot's
	// after an unattended upgrade), each with or without its headers.
	InstalledKernels []InstalledKernel
	// DKMS leaves the markers of a host-managed (DKMS) tt-kmd install.
	DKMS bool
	// InstalledKMD is the tt-kmd version installed for Kernel where the
	// host's modprobe finds it (/lib/modules/<kernel>/updates, indexed in
	// modules.dep): what the host boots. "" = none.
	InstalledKMD string
	// CachedKMD lists tt-kmd versions already built in
	// /var/cache/tt-kmd/<kernel>/<version>/tenstorrent.ko.
	CachedKMD []string
	// HostTTSMI is the version of the host's /usr/local/bin/tt-smi; "" = none.
	HostTTSMI string
	// HostGlibc is the glibc release of the host's OS (2.35 on Ubuntu
	// 22.04, 2.31 on 20.04); default DefaultGlibc. A tt-smi binary built
	// for a newer glibc does not start on the host.
	HostGlibc string
	// LegacyVenv creates /opt/tt with a pre-5.x tt-smi virtualenv.
	LegacyVenv bool
	// MissingTags are tt-kmd git tags (e.g. "ttkmd-9.9.9") the fake remote
	// does not have.
	MissingTags []string
	// Lockdown is the kernel lockdown mode (/sys/kernel/security/lockdown:
	// "integrity" or "confidentiality" under Secure Boot); "" = none.
	// SigEnforce is module.sig_enforce=1. Either refuses the unsigned
	// modules a container build makes.
	Lockdown   string
	SigEnforce bool
	// TrustedCerts are certificates (PEM or DER) the kernel trusts for
	// module signatures (built in, or enrolled as MOKs): a module signed by
	// one loads under enforcement and lockdown.
	TrustedCerts [][]byte
	// ModulesDisabled is kernel.modules_disabled=1: no module loads or
	// unloads until reboot.
	ModulesDisabled bool
	// UnresolvedKMD are tt-kmd versions whose module needs symbols the
	// running kernel does not export (built against another tree): insmod
	// refuses them with "Unknown symbol in module".
	UnresolvedKMD []string
	// BrokenBuild makes `make modules` fail like a compiler mismatch.
	BrokenBuild bool
	// Wedged makes `tt-smi -s` fail (as after a bad reset) until the right
	// kind of reset has been issued ResetsToHeal times.
	Wedged bool
	// ResetsToHeal is how many resets a wedged host needs; 0 means 1.
	ResetsToHeal int
	// FlashDelay is how long tt-flash takes.
	FlashDelay time.Duration
	// BuildDelay is how long `make modules` takes, LoadDelay how long an
	// insmod takes (the fleet benchmark's build and cache-hit times).
	BuildDelay, LoadDelay time.Duration
	// ConfigSpaceResetBug makes tt-flash print "Config space reset not
	// completed for device 0" yet exit 0 (tt-smi #88).
	ConfigSpaceResetBug bool
	// SMISnapshotBroken makes `tt-smi -s` print a traceback instead of JSON
	// while sysfs telemetry still works (e.g. a tt-smi/glibc mismatch).
	SMISnapshotBroken bool
	// FlashNoiseLines adds that many progress lines to tt-flash's output,
	// to exercise output truncation.
	FlashNoiseLines int
	// RealOS says root already holds a real OS (the sim's overlay of a
	// real-host root filesystem): Create then writes only what the kernel
	// and the cards expose (/proc, /sys, /dev, the fake state) and never an
	// OS file (libc, kernel headers, toolchain, module cache), so the real
	// ones stay; Kernel must be the release of its headers.
	RealOS bool
}

// InstalledKernel is a kernel package on the host that is not running.
type InstalledKernel struct {
	Release string
	// Headers installs its build tree (linux-headers-<Release>).
	Headers bool
	// DebianHeaders lays its tree out as Debian does, naming gcc-12.
	DebianHeaders bool
	// CC, with headers, is the compiler they name (Debian's
	// .kernelvariables), e.g. a gcc-14 the host lacks; "" = none named.
	CC string
}

// Holder is a process with Tenstorrent device files open.
type Holder struct {
	PID  int
	Comm string
	// PodUID and ContainerID place the process in a kubepods cgroup; both
	// empty means a host process outside Kubernetes.
	PodUID      string
	ContainerID string
	// CgroupV1 writes a cgroup v1 style /proc/<pid>/cgroup instead of v2.
	CgroupV1 bool
	// Devices are the /dev/tenstorrent/<N> indices it holds; nil means {0}.
	Devices []int
	// Unkillable models a process stuck in uninterruptible sleep: SIGKILL is
	// accepted but the process and its fds stay.
	Unkillable bool
	// Via is how it holds each device after tt-kmd >= 2.10's close():
	// "" an open fd; HoldMmap a mapping of the device (in /proc/<pid>/maps,
	// the fd closed); HoldDmaBuf a dma-buf fd tenstorrent exported (its
	// fdinfo's exp_name, the device fd closed). Each keeps the module busy.
	Via string
}

// How a Holder holds a device (Holder.Via).
const (
	HoldMmap   = "mmap"
	HoldDmaBuf = "dmabuf"
)

// Device is one Tenstorrent PCI function.
type Device struct {
	// Firmware is the running fw bundle version, 4-part (e.g. "18.2.0.0").
	Firmware string
	// Board is the tt-smi board_type (n150, n300, p150, galaxy-wh …).
	Board string
	// SubsystemDevice is the PCI subsystem id, e.g. "0x0035" for a Wormhole
	// Galaxy UBB; "" means a PCIe card.
	SubsystemDevice string
	// FailFlash makes tt-flash fail on this chip.
	FailFlash bool
	// SPIVerifyFails: what tt-flash writes to this chip's SPI never reads
	// back the same, so both its verifications fail and it says the board
	// needs a person (ttflash.NeedsPersonMarker).
	SPIVerifyFails bool
	// SPIFailed: tt-flash failed this chip's SPI write (SPIVerifyFails)
	// and no one has fixed it since; resetting or flashing the board is
	// EventFailedSPITouched.
	SPIFailed bool
	// SPI is the bundle version in the chip's SPI flash, which it runs
	// after its next reset; "" means Firmware. Set it ahead of Firmware for
	// a card flashed but not reset.
	SPI string
	// RemoteChips are ASICs behind this one over Ethernet (an n300's
	// second chip): tt-smi lists them with bus_id N/A, sysfs does not.
	// nil means one for an n300, none otherwise.
	RemoteChips *int
	// BundleUnreadable: the running firmware does not report its bundle
	// version (tt-smi prints N/A; no sysfs tt_fw_bundle_ver).
	BundleUnreadable bool
	// Silent: the card's firmware does not answer. tt-kmd binds it and
	// makes its /dev/tenstorrent node all the same (enumerate.c:
	// init_hardware fails, needs_hw_init), but reads no telemetry from it,
	// so none of its tt_* sysfs attributes reads (telemetry.c: -ENODATA).
	Silent bool
	// BootsSilent: the image in the card's SPI does not start. The reset
	// that boots it (tt-flash's, or tt-smi -r) leaves the card Silent.
	BootsSilent bool
	// ProbeFailsOn are tt-kmd versions whose PCI probe of this card fails
	// (enumerate.c: "Device initialization failed", -EIO): the module loads,
	// but the card gets no driver binding and no /dev/tenstorrent node.
	ProbeFailsOn []string
}

// remote is the number of remote chips behind d.
func (d Device) remote() int {
	if d.RemoteChips != nil {
		return *d.RemoteChips
	}
	if d.Board == "n300" {
		return 1
	}
	return 0
}

// spi is the bundle the chip loads on its next reset.
// boot is the card's reset: it runs what its SPI holds, or nothing that
// answers when that image does not start.
func (d *Device) boot() {
	d.Firmware = d.spi()
	if d.BootsSilent {
		d.Silent = true
	}
}

func (d Device) spi() string {
	if d.SPI == "" {
		return d.Firmware
	}
	return d.SPI
}

// Defaults used when a Spec leaves a field empty.
const (
	DefaultKernel   = "5.15.0-91-generic"
	DefaultFirmware = "18.2.0.0"
	DefaultBoard    = "n150"
	// DefaultGlibc is Ubuntu 22.04's glibc, what the fleet's hosts run and
	// what the helper image's tt-smi flavour (ubuntu-22.04) needs.
	DefaultGlibc = "2.35"
	// GalaxyWormholeSubsystem and GalaxyBlackholeSubsystem are the Galaxy
	// UBB PCI subsystem ids that select `tt-smi -glx_reset`.
	GalaxyWormholeSubsystem  = "0x0035"
	GalaxyBlackholeSubsystem = "0x0047"
	pcieSubsystem            = "0x0008"
	vendorTenstorrent        = ttkmd.VendorID
	deviceWormhole           = "0x401e"
	deviceBlackhole          = "0xb140"
	deviceGrayskull          = "0xfaca"
)

// pciDevice is the PCI device id of d's chips, by its board: Blackhole's
// p100/p150/p300 and Galaxy, Grayskull's e75/e150/e300, else Wormhole.
func (d Device) pciDevice() string {
	switch {
	case strings.HasPrefix(d.Board, "p") || strings.HasSuffix(d.Board, "galaxy-bh"):
		return deviceBlackhole
	case strings.HasPrefix(d.Board, "e"):
		return deviceGrayskull
	}
	return deviceWormhole
}

func (s Spec) withDefaults() Spec {
	if s.Kernel == "" {
		s.Kernel = DefaultKernel
	}
	if s.KernelBuild == "" {
		s.KernelBuild = KernelBuildOf(s.Kernel)
	}
	if s.HostGlibc == "" {
		s.HostGlibc = DefaultGlibc
	}
	if s.Devices == nil {
		s.Devices = []Device{{}, {}}
	}
	devs := make([]Device, len(s.Devices))
	for i, d := range s.Devices {
		if d.Firmware == "" {
			d.Firmware = DefaultFirmware
		}
		if d.Board == "" {
			d.Board = DefaultBoard
		}
		if d.SubsystemDevice == "" {
			d.SubsystemDevice = pcieSubsystem
		}
		devs[i] = d
	}
	s.Devices = devs
	if s.ResetsToHeal <= 0 {
		s.ResetsToHeal = 1
	}
	return s
}

// galaxy reports whether any device is a Galaxy UBB (needs -glx_reset).
func (s Spec) galaxy() bool {
	for _, d := range s.Devices {
		if d.SubsystemDevice == GalaxyWormholeSubsystem || d.SubsystemDevice == GalaxyBlackholeSubsystem {
			return true
		}
	}
	return false
}
