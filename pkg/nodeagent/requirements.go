package nodeagent

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Where a requirement must be met.
type Where string

const (
	// InImage is the helper image's own file system (the container's /).
	InImage Where = "image"
	// OnHost is the node, under the host root the pod mounts.
	OnHost Where = "host"
	// InVolume is a volume the helper's pod mounts (a ConfigMap kubectl tt
	// publishes): present at run time, never in the image.
	InVolume Where = "volume"
)

// Kind of access.
type Kind string

const (
	// KindExec is a program the agent executes. Name is argv[0] (looked up
	// on the image's PATH, or an absolute path); Path, when set, is where
	// the lookup must land.
	KindExec Kind = "exec"
	// KindUsedBy is a program a program the agent runs executes in turn
	// (tt-flash's and tt-smi's Galaxy resets run sudo ipmitool).
	KindUsedBy Kind = "used-by"
	// KindRead is a file or directory the agent reads (globs and <kver>
	// stand for what is found at run time).
	KindRead Kind = "read"
	// KindWrite is a file or directory the agent writes.
	KindWrite Kind = "write"
)

// Requirement is one program or path the agent needs for a task.
type Requirement struct {
	Task  Op     `json:"task"`
	Kind  Kind   `json:"kind"`
	Where Where  `json:"where"`
	Name  string `json:"name"`
	// Path is where Name must resolve to (exec in the image), or the path
	// itself (read, write).
	Path string `json:"path,omitempty"`
	// Package is the Debian package that provides it in the image; empty
	// for what the release installs itself (kubectl-tt, tt-smi, tt-flash).
	Package string `json:"package,omitempty"`
	Why     string `json:"why"`
}

// ImagePATH is the helper image's PATH (its config's Env, internal/nodeimage):
// tt-flash's virtualenv first.
const ImagePATH = "/opt/rollbook/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// caBundle is Debian's CA bundle, which git and Go's TLS read.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// TTFlashPath is where the image's virtualenv puts tt-flash.
const TTFlashPath = "/opt/rollbook/venv/bin/tt-flash"

// Requirements is every program and path the agent executes, reads or
// writes, per task. Exec goes through execution.run, which refuses
// anything not declared here; `kubectl-tt node-agent requirements` prints
// it and hack/image-check.sh checks every image entry inside the image.
var Requirements = []Requirement{
	// kmd
	{OpKMD, KindExec, InImage, "git", "", "git", "clone tag ttkmd-<version>; rev-parse HEAD: the commit built (--commit pin)"},
	{OpKMD, KindRead, InImage, "ca-certificates", caBundle, "ca-certificates", "git clone over https"},
	{OpKMD, KindExec, InImage, "chroot", "", "coreutils", "build in the host's root (its headers and compiler)"},
	{OpKMD, KindExec, OnHost, "make", "/usr/bin/make", "", "kbuild: make -C /lib/modules/<kver>/build M=<src> modules"},
	{OpKMD, KindUsedBy, OnHost, "gcc", "/usr/bin/gcc-*", "", "the compiler the kernel headers name (Debian 12: gcc-12)"},
	{OpKMD, KindExec, InImage, "modinfo", "", "kmod", "check the built module's version and vermagic"},
	{OpKMD, KindExec, InImage, "rmmod", "", "kmod", "unload the old module"},
	{OpKMD, KindExec, InImage, "insmod", "", "kmod", "load the new module"},
	{OpKMD, KindExec, OnHost, "depmod", "/usr/sbin/depmod", "", "index /lib/modules/<kver> for boot, with the host's depmod.d"},
	{OpKMD, KindExec, OnHost, "modprobe", "/usr/sbin/modprobe", "",
		"what the host's boot would load (--show-depends) and with which options (-c)"},
	{OpKMD, KindExec, InImage, "kill", "", "procps", "--force-unload: SIGKILL device holders"},
	{OpKMD, KindRead, OnHost, "osrelease", "/proc/sys/kernel/{osrelease,version}", "", "running kernel release and build"},
	{OpKMD, KindRead, OnHost, "module", "/sys/module/tenstorrent/{version,refcnt}", "", "loaded version and users"},
	{OpKMD, KindRead, OnHost, "dkms", "/var/lib/dkms/tenstorrent, /usr/src/tenstorrent-*/dkms.conf", "", "host-managed check"},
	{OpKMD, KindRead, OnHost, "module-policy", "/proc/sys/kernel/modules_disabled, /sys/module/module/parameters/sig_enforce, " +
		"/sys/kernel/security/lockdown", "", "would the kernel load an unsigned module"},
	{OpKMD, KindRead, OnHost, "headers", "/lib/modules/<kver>/build", "", "kernel build tree (symlink into /usr/src)"},
	{OpKMD, KindRead, OnHost, "holders", "/proc/*/{fd,fdinfo,maps,comm,cgroup}", "",
		"processes holding /dev/tenstorrent: fds, tenstorrent dma-bufs, mappings (hostPID)"},
	{OpKMD, KindWrite, OnHost, "cache", "/var/cache/tt-kmd/<kver>/<version>/<module SHA-256>/tenstorrent.ko{,.json}", "",
		"module cache, by content: the vouched module (--module-sha256), and builds for the installed kernels it does not run"},
	{OpKMD, KindRead, InVolume, "shared-module", "/rollbook/module/{tenstorrent.ko.gz,module.json,signing_key.x509}", "",
		"the module kubectl tt vouched for and its signing certificate (a ConfigMap volume, --module-from)"},
	{OpKMD, KindWrite, OnHost, "updates", "/lib/modules/<kver>/updates/tenstorrent.ko", "", "reboot persistence"},
	{OpKMD, KindWrite, OnHost, "modules-load", "/etc/modules-load.d/tenstorrent.conf", "", "load at boot"},
	{OpKMD, KindWrite, OnHost, "depmod-override", "/etc/depmod.d/tenstorrent-rollbook.conf", "",
		"boot loads our updates/ copy whatever the host's search order"},
	{OpKMD, KindWrite, OnHost, "udev", "/etc/udev/rules.d/50-tenstorrent.rules, /dev/tenstorrent/*", "", "device permissions"},
	// kmd-build: the module for the running kernel, once per kernel; loads nothing
	{OpKMDBuild, KindExec, InImage, "git", "", "git", "clone tag ttkmd-<version>; rev-parse HEAD: the --commit pin"},
	{OpKMDBuild, KindRead, InImage, "ca-certificates", caBundle, "ca-certificates", "git clone over https"},
	{OpKMDBuild, KindExec, InImage, "chroot", "", "coreutils", "build in the host's root (its headers and compiler)"},
	{OpKMDBuild, KindExec, OnHost, "make", "/usr/bin/make", "", "kbuild: make -C /lib/modules/<kver>/build M=<src> modules"},
	{OpKMDBuild, KindUsedBy, OnHost, "gcc", "/usr/bin/gcc-*", "", "the compiler the kernel headers name (Debian 12: gcc-12)"},
	{OpKMDBuild, KindExec, InImage, "modinfo", "", "kmod", "check the built module's version and vermagic"},
	{OpKMDBuild, KindRead, OnHost, "osrelease", "/proc/sys/kernel/{osrelease,version}", "", "running kernel release and build"},
	{OpKMDBuild, KindRead, OnHost, "headers", "/lib/modules/<kver>/build", "", "kernel build tree (symlink into /usr/src)"},
	{OpKMDBuild, KindWrite, OnHost, "cache", "/var/cache/tt-kmd/<kver>/<version>/<module SHA-256>/tenstorrent.ko{,.json}", "",
		"build dir and the module built (printed on stdout for kubectl tt)"},
	// smi
	{OpSMI, KindExec, InImage, "tt-smi", DefaultSMISource, "", "the release binary delivered to the host (--source)"},
	{OpSMI, KindExec, InImage, "chroot", "", "coreutils", "run the host's tt-smi as the host does"},
	{OpSMI, KindExec, OnHost, "tt-smi", "/" + hostSMIPath, "", "current and installed version"},
	{OpSMI, KindExec, OnHost, ".tt-smi.new", "/" + stagedSMIPath, "", "staged binary, tried with the host's libc"},
	{OpSMI, KindRead, OnHost, "packages", smiPackageFiles, "", "refuse to shadow or overwrite a package's tt-smi"},
	{OpSMI, KindRead, OnHost, "dkms", "/var/lib/dkms/tenstorrent, /usr/src/tenstorrent-*/dkms.conf", "", "host-managed check"},
	{OpSMI, KindWrite, OnHost, "tt-smi", "/" + hostSMIPath, "", "atomic rename over the host's tt-smi"},
	{OpSMI, KindWrite, OnHost, "legacy-venv", "/opt/tt", "", "pre-5.x virtualenv removed"},
	// flash
	{OpFlash, KindExec, InImage, "tt-smi", DefaultSMISource, "", "snapshot (-s) and resets (-r, -glx_reset)"},
	{OpFlash, KindExec, InImage, "tt-flash", TTFlashPath, "", "flash the bundle"},
	{OpFlash, KindExec, InImage, "kill", "", "procps", "--force-unload: SIGKILL device holders"},
	{OpFlash, KindUsedBy, InImage, "python3", "", "python3", "the interpreter of tt-flash's virtualenv"},
	{OpFlash, KindRead, InImage, "ca-certificates", caBundle, "ca-certificates", "bundle download over https"},
	{OpFlash, KindUsedBy, InImage, "sudo", "", "sudo", "tt-flash and tt-smi -glx_reset run sudo ipmitool on Galaxy"},
	{OpFlash, KindUsedBy, InImage, "ipmitool", "", "ipmitool", "Galaxy tray power cycle"},
	{OpFlash, KindRead, OnHost, "sysfs", "/sys/class/tenstorrent/*/{tt_fw_bundle_ver,tt_card_type}", "", "readback fallback"},
	{OpFlash, KindRead, OnHost, "pci", "/sys/bus/pci/devices/*/{vendor,subsystem_device}", "", "Galaxy detection"},
	{OpFlash, KindRead, OnHost, "holders", "/proc/*/{fd,fdinfo,maps,comm,cgroup}, /sys/module/tenstorrent/refcnt", "", "device in use"},
	// clean-cache (kubectl tt cleanup --host-caches)
	{OpCleanCache, KindWrite, OnHost, "cache", "/var/cache/tt-kmd, /usr/local/bin/.tt-smi.new", "", "removed"},
	// probe
	{OpProbe, KindExec, InImage, "chroot", "", "coreutils", "run the host's tt-smi --version"},
	{OpProbe, KindExec, OnHost, "tt-smi", onHostPATH + "tt-smi", "", "the version of the first tt-smi on the host's PATH"},
	{OpProbe, KindRead, OnHost, "packages", smiPackageFiles, "", "which package owns each tt-smi on the host's PATH"},
	{OpProbe, KindExec, InImage, "git", "", "git", "ls-remote tag ttkmd-<version> (the roll pins its commit), unless it is loaded"},
	{OpProbe, KindRead, InImage, "ca-certificates", caBundle, "ca-certificates", "git ls-remote over https"},
	{OpProbe, KindRead, OnHost, "host", "/proc, /sys/module/tenstorrent, /lib/modules/<kver>/build{,/.kernelvariables}, " +
		"/usr/bin/{make,gcc*}", "", "what an upgrade would need: headers and the compiler they name"},
	{OpProbe, KindRead, OnHost, "module-policy", "/proc/sys/kernel/modules_disabled, /sys/module/module/parameters/sig_enforce, " +
		"/sys/kernel/security/lockdown", "", "would the kernel load an unsigned module"},
	{OpProbe, KindRead, OnHost, "devices", "/sys/bus/pci/devices/*/vendor, /dev/tenstorrent/*", "",
		"the cards present and those the module bound"},
}

// onHostPATH prefixes a program found on the host's PATH (HostSMI).
const onHostPATH = "$PATH/"

// smiPackageFiles are what says which package owns a tt-smi.
const smiPackageFiles = "/etc/environment, /var/lib/dpkg/info/*.list, " +
	"/usr{,/local}/lib/python3*/{dist,site}-packages/tt_smi-*.dist-info/RECORD"

// errUndeclared marks an exec the requirements table does not list: an
// agent bug (the image may lack the program), never run.
var errUndeclared = errors.New("not declared in the node agent's requirements table")

// checkExec reports whether the table lets task run argv. argv[0] is
// declared by name, or by its absolute path (the smi source may be given
// with --source; any tt-smi binary counts). `chroot ROOT PROG …` needs
// chroot in the image and PROG on the host.
func checkExec(task Op, root string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("empty argv: %w", errUndeclared)
	}
	if !declared(task, InImage, argv[0]) {
		return fmt.Errorf("%s %s: %w", task, argv[0], errUndeclared)
	}
	if argv[0] == "chroot" {
		if len(argv) < 3 || filepath.Clean(argv[1]) != filepath.Clean(root) || !declared(task, OnHost, argv[2]) {
			return fmt.Errorf("%s %s: %w", task, strings.Join(argv[:min(3, len(argv))], " "), errUndeclared)
		}
	}
	return nil
}

func declared(task Op, where Where, prog string) bool {
	return slices.ContainsFunc(Requirements, func(r Requirement) bool {
		if r.Task != task || r.Kind != KindExec || r.Where != where {
			return false
		}
		switch {
		case where == OnHost && strings.HasPrefix(r.Path, onHostPATH):
			return prog == r.Name || filepath.IsAbs(prog) && filepath.Base(prog) == strings.TrimPrefix(r.Path, onHostPATH)
		case where == OnHost:
			return prog == r.Path || prog == r.Name || kverMatch(r.Path, prog)
		case filepath.IsAbs(prog):
			return prog == r.Path || filepath.Base(prog) == r.Name
		}
		return prog == r.Name
	})
}

// kverMatch: path is pattern with <kver> standing for one kernel release.
func kverMatch(pattern, path string) bool {
	if !strings.Contains(pattern, "<kver>") {
		return false
	}
	ok, _ := filepath.Match(strings.ReplaceAll(pattern, "<kver>", "*"), path)
	return ok
}
