package fakehost

import (
	"os"
	"path/filepath"
	"strconv"
)

// InstallKernel installs kernel k on the host without booting it, as a
// kernel package does: its module tree, and its build tree with Headers.
func InstallKernel(root string, k InstalledKernel) error {
	if err := os.MkdirAll(filepath.Join(root, "lib/modules", k.Release, "kernel"), 0o755); err != nil {
		return err
	}
	if !k.Headers {
		return writeFile(filepath.Join(root, bootConfigPath(k.Release)), kernelConfig(Spec{DebianHeaders: k.DebianHeaders}))
	}
	if err := createHeaders(root, Spec{Kernel: k.Release, KernelHeaders: true, DebianHeaders: k.DebianHeaders}); err != nil {
		return err
	}
	if k.CC == "" {
		return nil
	}
	return writeFile(filepath.Join(root, "usr/src/linux-headers-"+k.Release, ".kernelvariables"), "CC = $(CROSS_COMPILE)"+k.CC+"\n")
}

// Reboot models the host rebooting into kernel: every process is gone, the
// running kernel changes, and tt-kmd comes back only when modules-load.d
// names it and the new kernel's module tree has a copy (what a persisted
// install leaves for the kernel it was built for). headers adds the new
// kernel's build tree.
func Reboot(root, kernel string, headers bool) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	entries, _ := os.ReadDir(filepath.Join(root, "proc"))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 1 {
			if err := EndProcess(root, pid); err != nil {
				return err
			}
		}
	}
	if err := unloadModule(root); err != nil {
		return err
	}
	st.Kernel = kernel
	if err := saveState(root, st); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, osreleasePath), kernel+"\n"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, kversionPath), KernelBuildOf(kernel)+"\n"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "lib/modules", kernel, "kernel"), 0o755); err != nil {
		return err
	}
	// An installed kernel keeps its build tree and config.
	if _, err := os.Lstat(filepath.Join(root, "lib/modules", kernel, "build")); headers && os.IsNotExist(err) {
		if err := createHeaders(root, Spec{Kernel: kernel, KernelHeaders: true}); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(root, bootConfigPath(kernel))); os.IsNotExist(err) {
		if err := writeFile(filepath.Join(root, bootConfigPath(kernel)), kernelConfig(Spec{})); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/modules-load.d/tenstorrent.conf")); err != nil {
		return nil
	}
	kos, _ := filepath.Glob(filepath.Join(root, "lib/modules", kernel, "updates", "*", "tenstorrent.ko"))
	more, _ := filepath.Glob(filepath.Join(root, "lib/modules", kernel, "updates", "tenstorrent.ko"))
	for _, ko := range append(more, kos...) {
		b, err := os.ReadFile(ko)
		if err != nil {
			continue
		}
		if v, vermagic, err := parseKernelObject(b); err == nil && vermagic == kernel && !layoutRefused(root, kernel, b) {
			return loadModule(root, v, 0, st)
		}
	}
	return nil
}
