package tt

import (
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The helpers each runbook creates, rendered from the same parts the
// runbooks use (command, env, mounts), for the admission tests and
// `kubectl tt install`, which must see every shape a run can make.

// KMDProbeSpec is the probe of a kmd run on node.
func KMDProbeSpec(cfg *KMDConfig, node string) kube.HelperSpec {
	return probeSpec(cfg.Helper, node, cfg.RunID, kmdProbeCommand(cfg))
}

// FirmwareHelperSpec is the flash helper on node.
func FirmwareHelperSpec(cfg *FirmwareConfig, node string) kube.HelperSpec {
	s := helperSpec(cfg.Helper, flashTask, node, cfg.helperKey(), flashCommand(cfg), cfg.ForceUnload, cfg.RunID)
	s.Env = append(s.Env, cfg.bundleEnv()...)
	return s
}

// FirmwareProbeSpec is upgrade firmware's probe on node: it reads the
// bundle too.
func FirmwareProbeSpec(cfg *FirmwareConfig, node string) kube.HelperSpec {
	return probeSpec(cfg.Helper, node, cfg.RunID, fwProbeCommand(cfg))
}

// SMIHelperSpec is the smi helper on node.
func SMIHelperSpec(cfg *SMIConfig, node string) kube.HelperSpec {
	return helperSpec(cfg.Helper, "smi", node, cfg.Version, smiCommand(cfg.Version), false, cfg.RunID)
}

// ProbeSpec is a plain probe (firmware, smi, measure) on node.
func ProbeSpec(h HelperConfig, node, run string) kube.HelperSpec {
	return probeSpec(h, node, run, agentCommand("probe"))
}

func smiCommand(v string) []string { return agentCommand("smi", "--version", v) }

// CleanCacheSpec is the helper `kubectl tt cleanup --host-caches` runs on node.
func CleanCacheSpec(h HelperConfig, node string) kube.HelperSpec {
	return helperSpec(h, string(nodeagent.OpCleanCache), node, "host-caches", agentCommand(string(nodeagent.OpCleanCache)), false,
		"cleanup")
}
