package tt

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/kube"
)

// The two kmd helpers, rendered here and nowhere else (the admission
// policy is written from these shapes).
//
// kmd-build, once per kernel group, before any cordon:
//
//	kubectl-tt node-agent kmd-build --version V [--commit C] --git-url U [--timeout D]
//
// (no --commit only when no probe of the roll listed the tag: the build
// then pins the commit it checked out for the whole roll)
//
// volumes: the host's / at /host (read-write: the build runs in a chroot of
// it and writes /var/cache/tt-kmd); not privileged, every capability
// dropped but SYS_CHROOT; no host PID.
//
// kmd, on each node, once it is cordoned:
//
//	kubectl-tt node-agent kmd --version V [--timeout D] [--commit C] --git-url U [--force-unload]
//	    [--module-sha256 H --module-from /rollbook/module [--module-signer S]]
//
// (--commit is absent only before any probe saw the tag: a node at the
// target already, whose helper only persists what is loaded.) The git URL
// is always named, upstream's by default, so a policy can check it.
//
// volumes: the host's / at /host (read-write), and with --module-sha256 the
// shared module, ConfigMap tt-kmd-<16 hex>, read-only at /rollbook/module;
// privileged; host PID with --force-unload. No Secret, ever: H is the
// SHA-256 of the module kubectl tt vouched for, S the SHA-256 of the
// certificate (DER) it signed it with, which is in the ConfigMap.

// Names of helper tasks (the rollbook.dev/helper label) more than one
// file uses.
const (
	kmdTask      = "kmd"
	kmdBuildTask = "kmd-build"
	flashTask    = "flash"
)

// VouchedModule is a module kubectl tt checked (and signed): the only one
// a kmd helper of its kernel group loads.
type VouchedModule struct {
	// ConfigMap is where it is published (tt-kmd-<16 hex>).
	ConfigMap string
	// SHA256 is of the module file, signature included.
	SHA256 string
	// Signer is the SHA-256 of the signing certificate (DER), "" unsigned.
	Signer string
}

// KMDHelperSpec is the kmd helper of a run of cfg on node: with the roll's
// pinned commit ("" before any is known: a node at the target, whose
// helper only persists what is loaded) and the module vouched for the
// node's kernel group (nil: none).
func KMDHelperSpec(cfg *KMDConfig, node, commit string, m *VouchedModule) kube.HelperSpec {
	flags := []string{"--version", cfg.Version, "--git-url", cfg.gitURL()}
	if t := cfg.Helper.Timeout; t > 0 {
		// The agent's own deadline, inside the pod's: it stops and reports
		// (old module loaded) before the kubelet kills it mid-step.
		flags = append(flags, "--timeout", helperWorkTimeout(t).String())
	}
	if commit != "" {
		flags = append(flags, "--commit", commit)
	}
	if cfg.ForceUnload {
		flags = append(flags, "--force-unload")
	}
	if m != nil {
		flags = append(flags, "--module-sha256", m.SHA256, "--module-from", SharedModuleMount)
		if m.Signer != "" {
			flags = append(flags, "--module-signer", m.Signer)
		}
	}
	s := helperSpec(cfg.Helper, kmdTask, node, cfg.Version, agentCommand(kmdTask, flags...), cfg.ForceUnload, cfg.RunID)
	if m != nil {
		s.ConfigMaps = append(s.ConfigMaps, kube.ConfigMapMount{Name: sharedModuleVolume, ConfigMap: m.ConfigMap,
			MountPath: SharedModuleMount})
	}
	return s
}

// KMDBuildHelperSpec is the kmd-build helper of a run of cfg on node, with
// the roll's pinned commit ("" when no probe listed the tag).
func KMDBuildHelperSpec(cfg *KMDConfig, node, commit string) kube.HelperSpec {
	flags := []string{"--version", cfg.Version, "--git-url", cfg.gitURL()}
	if commit != "" {
		flags = append(flags, "--commit", commit)
	}
	if t := cfg.Helper.Timeout; t > 0 {
		flags = append(flags, "--timeout", helperWorkTimeout(t).String())
	}
	return helperSpec(cfg.Helper, kmdBuildTask, node, cfg.Version, agentCommand(kmdBuildTask, flags...), false, cfg.RunID)
}

// KMDHelperShapes are the helpers a kmd run of cfg makes on node, for the
// admission policy's dry run before the first: the probe, the build (with
// a commit: the roll pins one), and the install with a vouched module.
func KMDHelperShapes(cfg *KMDConfig, node string) []kube.HelperSpec {
	commit := cfg.Commit
	if commit == "" {
		commit = strings.Repeat("0", 40)
	}
	m := &VouchedModule{ConfigMap: "tt-kmd-0000000000000000", SHA256: strings.Repeat("0", 64), Signer: cfg.Signing.certSHA256()}
	return []kube.HelperSpec{KMDProbeSpec(cfg, node), KMDBuildHelperSpec(cfg, node, commit), KMDHelperSpec(cfg, node, commit, m)}
}

// vouchedIn is the vouched module a kmd helper pod was created with (its
// argv and its module volume), nil without one: a helper an interrupted run
// started is adopted as it was made.
func vouchedIn(p *corev1.Pod) *VouchedModule {
	if p == nil || len(p.Spec.Containers) == 0 {
		return nil
	}
	cm := mountedConfigMap(p, sharedModuleVolume)
	cmd := p.Spec.Containers[0].Command
	m := &VouchedModule{ConfigMap: cm}
	for i := 0; i+1 < len(cmd); i++ {
		switch cmd[i] {
		case "--module-sha256":
			m.SHA256 = cmd[i+1]
		case "--module-signer":
			m.Signer = cmd[i+1]
		}
	}
	if cm == "" || m.SHA256 == "" || !strings.HasPrefix(cm, "tt-kmd-") {
		return nil
	}
	return m
}

// mountedConfigMap is the ConfigMap p mounts as volume name, if any.
func mountedConfigMap(p *corev1.Pod, name string) string {
	if p == nil {
		return ""
	}
	for _, v := range p.Spec.Volumes {
		if v.Name == name && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}
