package tthost

import (
	"fmt"

	"github.com/rollbook/rollbook/internal/fakehost"
)

// Versions of the tt scenarios: the fleet starts at the old ones; a
// helper's tt-smi source offers OfferedTTSMI.
const (
	FleetKMD       = "2.7.0"
	FleetHostTTSMI = "5.0.0"
	OfferedTTSMI   = fakehost.ImageTTSMIVersion
	FleetFirmware  = fakehost.DefaultFirmware
	// DKMSKMD is what the host-managed node runs (its DKMS tree's version).
	DKMSKMD = "1.29.0"
	// StubbornPID is the host process holding /dev/tenstorrent/0 on the
	// stubborn node.
	StubbornPID = 7777
)

// Node labels the real operator and NFD use (docs/tt.md lists them).
const (
	LabelPCI           = "feature.node.kubernetes.io/pci-1200_1e52.present"
	LabelKMDVersion    = "driver.tenstorrent.com/kmd-version"
	LabelInstallMode   = "driver.tenstorrent.com/install-mode"
	LabelDriverSkip    = "driver.tenstorrent.com/skip"
	LabelSMIVersion    = "tt-smi.driver.tenstorrent.com/version"
	LabelFWVersion     = "firmware.tenstorrent.com/fw-version"
	LabelTelemetryGate = "tenstorrent.com/deploy.tt-telemetry"
)

// Role is what a node is for in a tt scenario.
type Role string

const (
	RolePlain       Role = "plain"
	RoleHostManaged Role = "host-managed" // DKMS install: must be refused
	RoleSkip        Role = "skip"         // driver.tenstorrent.com/skip=true
	RoleStubborn    Role = "stubborn"     // a host process (no pod) holds a device
)

// NodePlan is one node of a tt fleet: its fake host and its labels.
type NodePlan struct {
	Node   string
	Role   Role
	Galaxy bool
	Spec   fakehost.Spec
	Labels map[string]string
}

// AwkwardMin is how many nodes the awkward cases need (three awkward nodes
// plus two plain ones, so a roll still has somewhere to go).
const AwkwardMin = 5

// PlanFleet lays out nodes: every node a Tenstorrent node at FleetKMD
// (cached for FleetKMD, headers present, so a newer version is a clone +
// build and going back is a cache hit), tt-smi FleetHostTTSMI, PCIe boards
// except one Galaxy. With awkward, the last three nodes are, in order,
// host-managed, skip-labelled and stubborn; plain nodes come first, so
// kwok-node-0 is always plain.
func PlanFleet(nodes []string, awkward bool) ([]NodePlan, error) {
	if awkward && len(nodes) < AwkwardMin {
		return nil, fmt.Errorf("the awkward tt nodes need at least %d nodes, got %d (use --nodes %d)", AwkwardMin, len(nodes), AwkwardMin)
	}
	roles := make([]Role, len(nodes))
	for i := range roles {
		roles[i] = RolePlain
	}
	if awkward {
		n := len(nodes)
		roles[n-3], roles[n-2], roles[n-1] = RoleHostManaged, RoleSkip, RoleStubborn
	}
	plain := 0
	for _, r := range roles {
		if r == RolePlain {
			plain++
		}
	}
	out := make([]NodePlan, len(nodes))
	for i, node := range nodes {
		// The last plain node is the Galaxy, when there are PCIe nodes too.
		galaxy := roles[i] == RolePlain && plain >= 2 && i == plain-1
		out[i] = planNode(node, i, roles[i], galaxy)
	}
	return out, nil
}

func planNode(node string, i int, role Role, galaxy bool) NodePlan {
	spec := fakehost.Spec{
		LoadedKMD:     FleetKMD,
		KernelHeaders: true,
		CachedKMD:     []string{FleetKMD},
		HostTTSMI:     FleetHostTTSMI,
		Devices:       pcieBoards(i),
	}
	labels := map[string]string{
		LabelPCI:           "true",
		LabelKMDVersion:    FleetKMD,
		LabelInstallMode:   "container",
		LabelSMIVersion:    FleetHostTTSMI,
		LabelFWVersion:     FleetFirmware,
		LabelTelemetryGate: "true",
	}
	if galaxy {
		spec.Devices = galaxyBoards()
	}
	switch role {
	case RoleHostManaged:
		spec.DKMS, spec.LoadedKMD, spec.CachedKMD = true, DKMSKMD, nil
		// The operator labels host mode and never writes kmd or tt-smi
		// versions there.
		labels[LabelInstallMode] = "host"
		delete(labels, LabelKMDVersion)
		delete(labels, LabelSMIVersion)
	case RoleSkip:
		labels[LabelDriverSkip] = "true"
	case RoleStubborn:
		spec.Holders = []fakehost.Holder{{PID: StubbornPID, Comm: "tt-metal-bench"}}
	}
	return NodePlan{Node: node, Role: role, Galaxy: galaxy, Spec: spec, Labels: labels}
}

// pcieBoards alternates n150 and n300 cards, two per node.
func pcieBoards(i int) []fakehost.Device {
	board := "n150"
	if i%2 == 1 {
		board = "n300"
	}
	return []fakehost.Device{{Firmware: FleetFirmware, Board: board}, {Firmware: FleetFirmware, Board: board}}
}

// galaxyBoards is a Wormhole Galaxy 6U: 32 chips behind the UBB subsystem
// id that selects `tt-smi -glx_reset`.
func galaxyBoards() []fakehost.Device {
	devs := make([]fakehost.Device, 32)
	for i := range devs {
		devs[i] = fakehost.Device{Firmware: FleetFirmware, Board: "tt-galaxy-wh", SubsystemDevice: fakehost.GalaxyWormholeSubsystem}
	}
	return devs
}
