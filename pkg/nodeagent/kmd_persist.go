package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// udevRule has the effect of upstream tt-kmd's rule
// (udev-50-tenstorrent.rules): device nodes 0666 (devtmpfs creates them
// 0600 and workloads run unprivileged), and stable
// /dev/tenstorrent/by-id/<arch>-<asic id> links for Wormhole (0x401e) and
// Blackhole (0xb140) devices that report tt_asic_id.
const udevRule = udevRuleHeader +
	"SUBSYSTEM==\"tenstorrent\", MODE=\"0666\"\n" +
	"SUBSYSTEM==\"tenstorrent\", ATTRS{device}==\"0x401e\", ATTR{tt_asic_id}==\"?*\", " +
	"SYMLINK+=\"tenstorrent/by-id/wormhole-%s{tt_asic_id}\"\n" +
	"SUBSYSTEM==\"tenstorrent\", ATTRS{device}==\"0xb140\", ATTR{tt_asic_id}==\"?*\", " +
	"SYMLINK+=\"tenstorrent/by-id/blackhole-%s{tt_asic_id}\"\n"

const (
	udevRuleHeader = "# installed by rollbook node-agent (as tt-kmd's udev-50-tenstorrent.rules)\n"
	udevRulePath   = "etc/udev/rules.d/50-tenstorrent.rules"
)

var deviceNodeRE = regexp.MustCompile(`^[0-9]+$`)

// legacyUdevRule is what rollbook wrote at that path before it carried
// upstream's symlinks: still ours to replace.
const legacyUdevRule = "KERNEL==\"tenstorrent*\", MODE=\"0666\"\n"

// installUdev installs the udev rule for future device nodes and fixes the
// mode of the existing ones (the rule only applies to new events). A rule
// at that path that rollbook did not write is the host's (DKMS's
// post-install copies upstream's there; an admin may add symlinks, a group,
// a stricter mode): it is kept as it is, and so are the device modes.
func (x *execution) installUdev() (string, error) {
	a := x.agent
	rule := a.hostPath(udevRulePath)
	cur, err := os.ReadFile(rule)
	if err == nil && !bytes.HasPrefix(cur, []byte(udevRuleHeader)) && string(cur) != legacyUdevRule {
		return "kept the host's own /" + udevRulePath, nil
	}
	if err != nil || !bytes.Equal(cur, []byte(udevRule)) {
		if err := replaceFile(rule, strings.NewReader(udevRule), 0o644); err != nil {
			return "", err
		}
	}
	entries, err := os.ReadDir(a.hostPath("dev/tenstorrent"))
	if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	n := 0
	for _, e := range entries {
		if deviceNodeRE.MatchString(e.Name()) {
			if err := os.Chmod(a.hostPath(filepath.Join("dev/tenstorrent", e.Name())), 0o666); err != nil {
				return "", err
			}
			n++
		}
	}
	return fmt.Sprintf("rule installed, %d device node(s) set 0666", n), nil
}

// persist makes the module load at boot, which the operator leaves to its
// DaemonSet: install the .ko under /lib/modules/<kver>/updates, name that
// copy in the host's depmod.d (an override: the host's own search order may
// put extra/, where DKMS-style installs leave a copy, first, and the host
// re-runs depmod on every kernel package), index with the host's own depmod
// and configuration, list it in modules-load.d, and check that the host's
// modprobe now resolves to our copy. A new kernel still needs a new build
// (the cache key includes it): persistKernels makes it for the other
// installed kernels.
func (x *execution) persist(ctx context.Context, ko, kver string) (string, error) {
	a := x.agent
	dst := a.hostPath(filepath.Join("lib/modules", kver, rebootSafeDir, kmdModuleFile))
	if err := copyFileAtomic(dst, ko, 0o644); err != nil {
		return "", err
	}
	override := "# written by rollbook node-agent: boot loads the tt-kmd it installed in " + rebootSafeDir + "/\n" +
		"override " + kmdModuleName + " * " + rebootSafeDir + "\n"
	if err := replaceFile(a.hostPath(depmodOverrideConf), strings.NewReader(override), 0o644); err != nil {
		return "", err
	}
	dep := x.run(ctx, a.onHost("depmod", "-a", kver))
	if dep.err != nil {
		return "", toolFailure(ReasonHostError, dep, "depmod")
	}
	conf := "# written by rollbook node-agent: load tt-kmd at boot\n" + kmdModuleName + "\n"
	if err := replaceFile(a.hostPath(modulesLoadConf), strings.NewReader(conf), 0o644); err != nil {
		return "", err
	}
	probe := x.run(ctx, a.onHost("modprobe", "-S", kver, "--show-depends", kmdModuleName))
	if probe.err != nil {
		return "", toolFailure(ReasonHostError, probe, "modprobe --show-depends")
	}
	want := filepath.Join("/lib/modules", kver, rebootSafeDir, kmdModuleFile)
	if !strings.Contains(probe.stdout, want) {
		return "", fmt.Errorf("at boot modprobe would load %q, not our %s (stale DKMS or extra/ copy?)", strings.TrimSpace(probe.stdout),
			want)
	}
	return "installed " + want + ", /" + depmodOverrideConf + ", depmod, /" + modulesLoadConf, nil
}

// onHost is argv run as the host runs it: its own program, configuration
// and paths (a chroot of the host root the pod mounts).
func (a *Agent) onHost(argv ...string) []string {
	if a.Root == "/" || a.Root == "" {
		return argv
	}
	return append([]string{"chroot", a.Root}, argv...)
}
