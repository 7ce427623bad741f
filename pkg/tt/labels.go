// Package tt holds the Tenstorrent runbooks — tt-kmd, tt-smi and firmware
// upgrades — as steps over facts observed on each node. It keeps the real
// operator's public node labels, so workloads and dashboards built on
// tt-k8s-driver-manager keep working.
package tt

import "github.com/rollbook/rollbook/pkg/kube"

// The operator's public node labels (see docs/tt.md).
const (
	LabelPCIPresent      = "feature.node.kubernetes.io/pci-1200_1e52.present"
	LabelDriverSkip      = "driver.tenstorrent.com/skip"
	LabelKMDVersion      = "driver.tenstorrent.com/kmd-version"
	LabelInstallMode     = "driver.tenstorrent.com/install-mode"
	LabelSMIVersion      = "tt-smi.driver.tenstorrent.com/version"
	LabelFirmwareSkip    = "firmware.tenstorrent.com/skip"
	LabelFirmware        = "firmware.tenstorrent.com/fw-version"
	DefaultDeployGate    = "tenstorrent.com/deploy.tt-telemetry"
	InstallModeHost      = "host"
	InstallModeContainer = "container"
	// DevicePathPrefix is where Tenstorrent character devices live; pods
	// mounting it hold the kernel module.
	DevicePathPrefix = "/dev/tenstorrent"
)

// rollbook's own bookkeeping on tt nodes.
const (
	// AnnGatesPrior records the deploy-gate labels' values before we set
	// them to "false" (JSON object, null = absent), so they are restored
	// exactly, not just deleted.
	AnnGatesPrior = "rollbook.dev/tt-gates-prior"
	// AnnKMDResult is the last kmd helper result on the node (JSON).
	AnnKMDResult = "rollbook.dev/tt-kmd-result"
)

// DefaultHelperNodeLabel is the label a node needs for helpers to run on it
// unless the cluster admin names another (the policy's parameters): Node
// Feature Discovery's mark of a Tenstorrent card, which the operator roles
// cannot write.
var DefaultHelperNodeLabel = kube.NodeLabel{Key: LabelPCIPresent, Value: "true"}
