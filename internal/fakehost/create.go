package fakehost

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Create lays out a fake host under root (which must exist or be creatable)
// according to spec. Paths mirror a real Ubuntu node, so code under test
// only needs its host-root prefix pointed at root.
func Create(root string, spec Spec) error {
	if err := checkRoot(root); err != nil {
		return err
	}
	s := spec.withDefaults()
	st := &state{
		Kernel:              s.Kernel,
		Devices:             s.Devices,
		MissingTags:         s.MissingTags,
		BrokenBuild:         s.BrokenBuild,
		Galaxy:              s.galaxy(),
		FlashDelay:          s.FlashDelay,
		BuildDelay:          s.BuildDelay,
		LoadDelay:           s.LoadDelay,
		ConfigSpaceResetBug: s.ConfigSpaceResetBug,
		SMISnapshotBroken:   s.SMISnapshotBroken,
		FlashNoiseLines:     s.FlashNoiseLines,
		UnresolvedKMD:       s.UnresolvedKMD,
	}
	for _, b := range s.TrustedCerts {
		certs, err := ParseCertificates(b)
		if err != nil {
			return fmt.Errorf("TrustedCerts: %v", err)
		}
		for _, c := range certs {
			st.TrustedCerts = append(st.TrustedCerts, c.Raw)
		}
	}
	if s.Wedged {
		st.ResetsNeeded = s.ResetsToHeal
	}
	for _, h := range s.Holders {
		if h.Unkillable {
			st.Unkillable = append(st.Unkillable, h.PID)
		}
	}
	osFiles := func(f func() error) func() error {
		if s.RealOS {
			return func() error { return nil }
		}
		return f
	}
	steps := []func() error{
		func() error { return saveState(root, st) },
		func() error { return writeFile(filepath.Join(root, osreleasePath), s.Kernel+"\n") },
		func() error { return writeFile(filepath.Join(root, kversionPath), s.KernelBuild+"\n") },
		func() error { return os.MkdirAll(filepath.Join(root, "lib/modules", s.Kernel, "kernel"), 0o755) },
		osFiles(func() error { return writeFile(filepath.Join(root, bootConfigPath(s.Kernel)), kernelConfig(s)) }),
		func() error { return createPCI(root, s.Devices) },
		func() error { return createProcesses(root, s.Holders) },
		func() error { return createModule(root, s, st) },
		osFiles(func() error { return createHeaders(root, s) }),
		func() error { return createDKMS(root, s) },
		osFiles(func() error { return createCache(root, s) }),
		osFiles(func() error { return createInstalled(root, s) }),
		func() error { return createTTSMI(root, s) },
		osFiles(func() error { return writeFile(filepath.Join(root, libcPath), libcContent(s.HostGlibc)) }),
		func() error { return os.MkdirAll(filepath.Join(root, "etc/udev/rules.d"), 0o755) },
		func() error { return createModulePolicy(root, s) },
	}
	for _, k := range s.InstalledKernels {
		steps = append(steps, osFiles(func() error { return InstallKernel(root, k) }))
	}
	if s.RebootedInto != "" {
		steps = append(steps, func() error { return Reboot(root, s.RebootedInto, s.KernelHeaders) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("fakehost: create %s: %w", root, err)
		}
	}
	return nil
}

// KernelBuildOf is the build string (uname -v) of the fake kernel release
// kernel, as a Debian kernel package's: one build per release.
func KernelBuildOf(kernel string) string {
	return "#1 SMP PREEMPT_DYNAMIC Debian " + kernel + " (2025-01-07)"
}

func createPCI(root string, devs []Device) error {
	for i, d := range devs {
		dir := filepath.Join(root, pciDir, busID(i))
		attrs := map[string]string{
			"vendor":           vendorTenstorrent,
			"device":           d.pciDevice(),
			"subsystem_vendor": vendorTenstorrent,
			"subsystem_device": d.SubsystemDevice,
			"class":            "0x120000",
		}
		for name, v := range attrs {
			if err := writeFile(filepath.Join(dir, name), v+"\n"); err != nil {
				return err
			}
		}
	}
	// An unrelated PCI device, so code must filter by vendor.
	return writeFile(filepath.Join(root, pciDir, "0000:00:1f.0", "vendor"), "0x8086\n")
}

func createProcesses(root string, holders []Holder) error {
	// PID 1 holds ordinary files only: the walker must not count it.
	init := filepath.Join(root, "proc", "1")
	if err := writeFile(filepath.Join(init, "comm"), "systemd\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(init, "cgroup"), "0::/init.scope\n"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(init, "fd"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("/dev/null", filepath.Join(init, "fd", "0")); err != nil {
		return err
	}
	for _, h := range holders {
		if h.PID <= 1 {
			return fmt.Errorf("holder pid %d: must be > 1", h.PID)
		}
		if err := writeProcess(root, h); err != nil {
			return err
		}
	}
	return nil
}

// cgroupFile renders /proc/<pid>/cgroup the way the kubelet's systemd (v2)
// or cgroupfs (v1) driver names pod cgroups.
func cgroupFile(h Holder) string {
	if h.PodUID == "" {
		return "0::/system.slice/user-workload.service\n"
	}
	if h.CgroupV1 {
		path := "/kubepods/besteffort/pod" + h.PodUID + "/" + h.ContainerID
		return "12:devices:" + path + "\n11:memory:" + path + "\n0::/\n"
	}
	uid := strings.ReplaceAll(h.PodUID, "-", "_")
	return "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid +
		".slice/cri-containerd-" + h.ContainerID + ".scope\n"
}

func createModule(root string, s Spec, st *state) error {
	if s.LoadedKMD == "" {
		return nil
	}
	refs := 0
	for _, h := range s.Holders {
		if h.Devices == nil {
			refs++
		} else {
			refs += len(h.Devices)
		}
	}
	if s.Refcnt != nil {
		refs = *s.Refcnt
	}
	return loadModule(root, s.LoadedKMD, refs, st)
}

func createHeaders(root string, s Spec) error {
	if !s.KernelHeaders {
		return nil
	}
	src := "/usr/src/linux-headers-" + s.Kernel
	makefile := "# fake kernel build tree for " + s.Kernel + "\n"
	// Where the headers name the compiler the kernel was built with:
	// Debian in .kernelvariables and the config, Ubuntu in the config only
	// (kernelConfig).
	if s.DebianHeaders {
		common := "/usr/src/linux-headers-" + s.Kernel + "-common"
		if err := writeFile(filepath.Join(root, common, "Makefile"), "# the common half of the tree\n"); err != nil {
			return err
		}
		makefile += "include " + common + "/Makefile\n"
		if err := writeFile(filepath.Join(root, src, ".kernelvariables"), "CC = $(CROSS_COMPILE)gcc-12\n"); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(root, src, "Makefile"), makefile); err != nil {
		return err
	}
	if !s.NoToolchain {
		if err := createToolchain(root, s.UbuntuHWEHeaders); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(root, src, "include/config/kernel.release"), s.Kernel+"\n"); err != nil {
		return err
	}
	// The kernel's config, as its headers and its image package carry it.
	conf := kernelConfig(s)
	if err := writeFile(filepath.Join(root, src, "include/config/auto.conf"), conf); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, bootConfigPath(s.Kernel)), conf); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, src, "scripts/sign-file"), "#!fake kernel sign-file\n"); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(root, src, "scripts/sign-file"), 0o755); err != nil {
		return err
	}
	// Absolute, like Ubuntu's: resolving it needs the host root prefix.
	return os.Symlink(src, filepath.Join(root, "lib/modules", s.Kernel, "build"))
}

// ubuntuHWECompiler is the compiler Ubuntu 22.04's HWE kernels name in
// their config (CONFIG_CC_VERSION_TEXT), while the release's gcc is 11.
const ubuntuHWECompiler = "x86_64-linux-gnu-gcc-12"

// createToolchain installs make and the host's compilers as the
// distribution does: gcc-12 under its triplet name, gcc-12 linking to it,
// and the default gcc linking to gcc-12 (Debian 12) or to gcc-11 (Ubuntu
// 22.04 with gcc-12 installed for its HWE kernels).
func createToolchain(root string, ubuntu bool) error {
	files := []string{"usr/bin/make", "usr/bin/" + ubuntuHWECompiler}
	links := map[string]string{"usr/bin/gcc-12": ubuntuHWECompiler, "usr/bin/gcc": "gcc-12"}
	if ubuntu {
		files = append(files, "usr/bin/x86_64-linux-gnu-gcc-11")
		links["usr/bin/gcc-11"], links["usr/bin/gcc"] = "x86_64-linux-gnu-gcc-11", "gcc-11"
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(root, f), "#!fake host toolchain\n"); err != nil {
			return err
		}
	}
	for l, to := range links {
		at := filepath.Join(root, l)
		if err := os.Remove(at); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.Symlink(to, at); err != nil {
			return err
		}
	}
	return nil
}

func createDKMS(root string, s Spec) error {
	if !s.DKMS {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(root, "var/lib/dkms/tenstorrent/1.29.0/source"), 0o755); err != nil {
		return err
	}
	return writeFile(filepath.Join(root, "usr/src/tenstorrent-1.29.0/dkms.conf"), "PACKAGE_NAME=tenstorrent\nPACKAGE_VERSION=1.29.0\n")
}

func createCache(root string, s Spec) error {
	for _, v := range s.CachedKMD {
		ko := filepath.Join(root, cacheDir, s.Kernel, v, "tenstorrent.ko")
		if err := os.MkdirAll(filepath.Dir(ko), 0o755); err != nil {
			return err
		}
		obj := KernelObject(v, s.Kernel)
		if err := os.WriteFile(ko, obj, 0o644); err != nil {
			return err
		}
		// The record the agent keeps next to a module it built (its
		// SHA-256 and commit), so a cached module is one it would trust.
		sum := sha256.Sum256(obj)
		rec := fmt.Sprintf(`{"sha256":%q,"commit":%q}`+"\n", hex.EncodeToString(sum[:]), FakeCommit("ttkmd-"+v))
		if err := os.WriteFile(ko+".json", []byte(rec), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// createInstalled puts Spec.InstalledKMD where the host's modprobe finds it.
func createInstalled(root string, s Spec) error {
	if s.InstalledKMD == "" {
		return nil
	}
	dir := filepath.Join(root, "lib/modules", s.Kernel)
	if err := writeFile(filepath.Join(dir, "updates/tenstorrent.ko"), string(KernelObject(s.InstalledKMD, s.Kernel))); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "modules.dep"), "updates/tenstorrent.ko:\n")
}

func createTTSMI(root string, s Spec) error {
	if s.HostTTSMI != "" {
		// The flavour the host's OS release needs: it ran here before.
		if err := WriteTTSMIBinaryFor(filepath.Join(root, hostSMIPath), s.HostTTSMI, s.HostGlibc); err != nil {
			return err
		}
	} else if err := os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755); err != nil {
		return err
	}
	if s.LegacyVenv {
		return writeFile(filepath.Join(root, "opt/tt/bin/tt-smi"), "#!/opt/tt/bin/python3\n")
	}
	return nil
}

// createModulePolicy writes the kernel's module-loading policy where the
// kernel exposes it.
func createModulePolicy(root string, s Spec) error {
	lockdown := "[none] integrity confidentiality"
	switch s.Lockdown {
	case "integrity":
		lockdown = "none [integrity] confidentiality"
	case "confidentiality":
		lockdown = "none integrity [confidentiality]"
	}
	enforce, disabled := "N", "0"
	if s.SigEnforce {
		enforce = "Y"
	}
	if s.ModulesDisabled {
		disabled = "1"
	}
	for path, v := range map[string]string{lockdownPath: lockdown, sigEnforcePath: enforce, modulesDisabledPath: disabled} {
		if err := writeFile(filepath.Join(root, path), v+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// Where the kernel exposes its module policy, relative to the root.
const (
	lockdownPath        = "sys/kernel/security/lockdown"
	sigEnforcePath      = "sys/module/module/parameters/sig_enforce"
	modulesDisabledPath = "proc/sys/kernel/modules_disabled"
)
