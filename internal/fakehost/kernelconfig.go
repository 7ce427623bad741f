package fakehost

import (
	"os"
	"path/filepath"
	"strings"
)

// A kernel's config, as its image package installs it in
// /boot/config-<release> and its headers carry it in
// include/config/auto.conf: what struct module's layout, and so the
// module_layout CRC a module built against it carries, follow from. One
// release and build configured twice (a site's own build of a distribution
// kernel) is two kernels to the module loader.

// kernelConfig is the config of s's kernel: the module options, the
// signature hash (Debian's kernels use sha256, Ubuntu's sha512), the
// compiler its headers name, and s.KernelConfig.
func kernelConfig(s Spec) string {
	hash := "sha512"
	if s.DebianHeaders {
		hash = "sha256"
	}
	conf := "CONFIG_MODULES=y\nCONFIG_MODVERSIONS=y\nCONFIG_MODULE_SIG=y\nCONFIG_MODULE_SIG_HASH=\"" + hash + "\"\n"
	switch {
	case s.DebianHeaders:
		conf += "CONFIG_CC_VERSION_TEXT=gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0\nCONFIG_CC_IS_GCC=y\n"
	case s.UbuntuHWEHeaders:
		conf += "CONFIG_CC_VERSION_TEXT=" + ubuntuHWECompiler + " (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0\nCONFIG_CC_IS_GCC=y\n"
	}
	for _, a := range s.KernelConfig {
		conf += a + "\n"
	}
	return conf
}

func bootConfigPath(kernel string) string { return filepath.Join("boot", "config-"+kernel) }

// SetKernelConfig adds assignment (CONFIG_X=value) to the running
// kernel's config, in /boot and in its headers' auto.conf when it has
// them: the host now runs a kernel of the same release and build,
// configured otherwise. Modules built before it are refused by its loader.
func SetKernelConfig(root, assignment string) error {
	kernel, err := readTrim(filepath.Join(root, osreleasePath))
	if err != nil {
		return err
	}
	for _, p := range []string{bootConfigPath(kernel), "usr/src/linux-headers-" + kernel + "/include/config/auto.conf"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(root, p), strings.TrimRight(string(b), "\n")+"\n"+assignment+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// runningLayout is the module_layout CRC of the running kernel's config
// ("" when /boot has none: no check).
func runningLayout(root, kernel string) string {
	b, err := os.ReadFile(filepath.Join(root, bootConfigPath(kernel)))
	if err != nil {
		return ""
	}
	return LayoutCRC(b)
}

// layoutRefused: the kernel's loader refuses ko, built against another
// config ("disagrees about version of symbol module_layout",
// kernel/module/version.c). A module or a kernel that says nothing is not
// judged.
func layoutRefused(root, kernel string, ko []byte) bool {
	have, want := moduleLayout(ko), runningLayout(root, kernel)
	return have != "" && want != "" && have != want
}

// BuiltKernelObject is the module the fake make builds of tt-kmd version
// against kernel's headers on the host at root.
func BuiltKernelObject(root, version, kernel string) []byte {
	conf, _ := os.ReadFile(filepath.Join(root, "usr/src/linux-headers-"+kernel, "include/config/auto.conf"))
	return KernelObjectFor(version, kernel, LayoutCRC(conf))
}

// setSrcVersion shows the loaded module's srcversion in sysfs, as the
// kernel does for a module with MODULE_VERSION (kernel/module/main.c,
// MODINFO_ATTR(srcversion)): the digest modpost takes of its sources
// (scripts/mod/sumversion.c), so two builds of one version from other
// commits differ in it.
func setSrcVersion(root string, ko []byte) error {
	info, err := modinfoOf(ko)
	if err != nil || info["srcversion"] == "" {
		return os.Remove(filepath.Join(root, moduleDir, "srcversion"))
	}
	return writeFile(filepath.Join(root, moduleDir, "srcversion"), info["srcversion"]+"\n")
}

// LoadForeignBuild makes the loaded tt-kmd a build of its version from
// other sources than the tag's (a fork, a moved tag, a hand build): its
// srcversion is another.
func LoadForeignBuild(root string) error {
	v, err := readTrim(filepath.Join(root, moduleDir, "version"))
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(root, moduleDir, "srcversion"), fakeSrcVersion(v+" (foreign)")+"\n")
}
