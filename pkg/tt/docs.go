package tt

import (
	"time"

	"github.com/rollbook/rollbook/deploy"
)

// Docs renders the tt runbooks for runbooks/*.md, keyed by file name. The
// steps' text does not depend on the cluster, so no client is needed.
func Docs() map[string]string {
	h := HelperConfig{Image: "IMAGE", Namespace: deploy.HelperNamespace, Timeout: 15 * time.Minute}
	kmd := KMDRunbook(nil, nil, &KMDConfig{Version: "VERSION", DeployGates: []string{DefaultDeployGate},
		Drain: true, FullNode: true, DrainTimeout: 10 * time.Minute, Helper: h})
	smi := SMIRunbook(nil, nil, &SMIConfig{Version: "VERSION", Helper: HelperConfig{Image: "IMAGE", Namespace: deploy.HelperNamespace,
		Timeout: 5 * time.Minute}})
	fw := &FirmwareConfig{Version: "VERSION", Drain: true, DrainTimeout: 10 * time.Minute, FlashTimeout: 15 * time.Minute,
		DeployGates: []string{DefaultDeployGate}, Helper: h}
	fw.Complete()
	return map[string]string{
		"tt-firmware.md": FirmwareRunbook(nil, nil, fw).Markdown(),
		"tt-kmd.md":      kmd.Markdown(),
		"tt-smi.md":      smi.Markdown(),
		"tt-release.md":  ReleaseRunbook(nil, nil).Markdown(),
	}
}
