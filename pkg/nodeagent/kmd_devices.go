package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rollbook/rollbook/pkg/ttkmd"
)

// pciVendorTenstorrent is Tenstorrent's PCI vendor id (tt-kmd's id table).
const pciVendorTenstorrent = ttkmd.VendorID

// binding is which Tenstorrent PCI functions a loaded module bound: the
// driver core links <function>/driver to the driver it bound, and tt-kmd
// makes /dev/tenstorrent/<ordinal> per bound card. A card whose probe
// failed (or that the module's id table lacks) is present but unbound;
// the module loads all the same.
type binding struct {
	present []string // PCI addresses, sorted
	ids     []string // their PCI device ids ("0x401e"), as present
	bound   []string // those bound to tenstorrent
	nodes   int      // /dev/tenstorrent/<N>
	// silent are the ordinals N whose card does not answer: tt-kmd made
	// its node although the card's hardware init failed.
	silent []int
}

// A card counts as served only when its firmware answers. tt-kmd registers
// a card (chardev, /dev/tenstorrent/N) even when init_hardware fails, and
// then skips init_telemetry (enumerate.c, tenstorrent_pci_probe:
// needs_hw_init); every telemetry attribute read fails -ENODATA while it
// needs init (telemetry.c, tt_telemetry_read32). So a card answers when one
// of its telemetry attributes (docs/sysfs-attributes.md) reads. tt-kmd
// exposes them since 1.28 ("Establish pattern for exposing attributes in
// sysfs"); with an older module loaded there is nothing to read.
var telemetryAttrs = []string{"tt_card_type", "tt_fw_bundle_ver", "tt_heartbeat", "tt_asic_id", "tt_serial", "tt_aiclk",
	"tt_arcclk", "tt_axiclk", "tt_m3app_fw_ver"}

// answers reports whether a card's class entry has readable telemetry.
func answers(classEntry string) bool {
	for _, f := range telemetryAttrs {
		if v, err := readTrimmed(filepath.Join(classEntry, f)); err == nil && v != "" {
			return true
		}
	}
	return false
}

// exposesTelemetry: tt-kmd version v has telemetry attributes in sysfs
// (1.28 and later; an unparsable version is taken to be recent).
func exposesTelemetry(v string) bool { return !ttkmd.Less(v, "1.28") }

func (a *Agent) devicesBound() binding {
	var b binding
	devs, _ := filepath.Glob(a.hostPath("sys/bus/pci/devices/*"))
	for _, d := range devs {
		if v, _ := readTrimmed(filepath.Join(d, "vendor")); v != pciVendorTenstorrent {
			continue
		}
		b.present = append(b.present, filepath.Base(d))
		id, _ := readTrimmed(filepath.Join(d, "device"))
		b.ids = append(b.ids, id)
		if drv, err := os.Readlink(filepath.Join(d, "driver")); err == nil && filepath.Base(drv) == kmdModuleName {
			b.bound = append(b.bound, filepath.Base(d))
		}
	}
	// Glob lists sorted: present and ids stay in step.
	loaded, _ := readOptional(a.hostPath(filepath.Join(moduleSysfs, "version")))
	telemetry := loaded != "" && exposesTelemetry(loaded)
	nodes, _ := os.ReadDir(a.hostPath("dev/tenstorrent"))
	for _, n := range nodes {
		ord, err := strconv.Atoi(n.Name())
		if err != nil {
			continue
		}
		b.nodes++
		if telemetry && !answers(a.hostPath(filepath.Join("sys/class/tenstorrent", "tenstorrent!"+n.Name()))) {
			b.silent = append(b.silent, ord)
		}
	}
	sort.Ints(b.silent)
	return b
}

// count is how many cards the module serves: bound, with a device node,
// and answering.
func (b binding) count() int { return min(len(b.bound), b.nodes-len(b.silent)) }

func (b binding) complete() bool { return len(b.present) > 0 && b.count() == len(b.present) }

// missing names the present functions not bound, or says the device nodes
// are short.
func (b binding) missing() string {
	var out []string
	for _, p := range b.present {
		found := false
		for _, q := range b.bound {
			found = found || p == q
		}
		if !found {
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		return "not bound: " + strings.Join(out, ", ")
	}
	if len(b.silent) > 0 {
		return "bound, but " + b.silentText()
	}
	return fmt.Sprintf("all bound, but only %d /dev/tenstorrent node(s)", b.nodes)
}

// silentText names the cards that do not answer and why.
func (b binding) silentText() string {
	var devs []string
	for _, n := range b.silent {
		devs = append(devs, "/dev/tenstorrent/"+strconv.Itoa(n))
	}
	return strings.Join(devs, ", ") + " do not answer: tt-kmd's hardware init of the card failed, its firmware reports no " +
		"telemetry (/sys/class/tenstorrent/tenstorrent!N/tt_*)"
}

func (b binding) String() string {
	return fmt.Sprintf("%d of %d Tenstorrent PCI device(s) bound", b.count(), len(b.present))
}

// verifyDevices checks the module just loaded serves every Tenstorrent
// card of the node; a card it left unbound fails the node, and the
// previous module, which served before as many cards as now, is put back
// (only rmmod and insmod of a verified module: nothing else changed yet).
func (x *execution) verifyDevices(ctx context.Context, previous string, before binding) (string, error) {
	now := x.agent.devicesBound()
	if now.complete() {
		return now.String() + ", " + strconv.Itoa(now.nodes) + " device node(s)", nil
	}
	if len(now.present) == 0 {
		return "", fail(ReasonDeviceMissing, "no Tenstorrent PCI device (vendor %s) under /sys/bus/pci/devices: the cards are gone "+
			"from the bus; reseat or replace them", pciVendorTenstorrent)
	}
	version := x.res.Target
	short := fmt.Sprintf("tt-kmd %s bound %s (%s); the kernel log says why (dmesg | grep tenstorrent on the node)", version, now,
		now.missing())
	if previous == "" {
		return "", fail(ReasonDevicesUnbound, "%s; no previous module to restore: tt-kmd %s stays loaded for the cards it bound. "+
			"Reseat or replace the card, or use a tt-kmd version that supports it", short, version)
	}
	detail, err := x.restorePrevious(ctx, previous, before)
	if err != nil {
		return "", fail(ReasonDevicesUnbound, "%s; restoring tt-kmd %s failed: %v. The node has no verified driver: fix the card "+
			"or reboot into the persisted module (tt-kmd %s), then re-run", short, previous, err, previous)
	}
	x.res.Restored = previous
	return "", fail(ReasonDevicesUnbound, "%s; %s. The node is back in service on tt-kmd %s: reseat or replace the card, or "+
		"stay on %s, then re-run", short, detail, previous, previous)
}

// restorePrevious unloads the module just loaded and loads previous again
// (rollbook's cache, else the host's own installed copy, which the new
// module has not replaced yet), then verifies it serves as many cards as
// before the swap.
func (x *execution) restorePrevious(ctx context.Context, previous string, before binding) (string, error) {
	a := x.agent
	if rm := x.run(ctx, []string{"rmmod", kmdModuleName}); rm.err != nil {
		return "", toolFailure(ReasonRmmodFailed, rm, "rmmod "+kmdModuleName)
	}
	load := []string{}
	if old := a.cacheEntries(x.res.Kernel, previous); len(old) > 0 {
		load = append([]string{"insmod", old[0].path}, x.hostModuleOptions(ctx)...)
	}
	if len(load) == 0 {
		load = a.onHost("modprobe", kmdModuleName)
	}
	if r := x.run(ctx, load); r.err != nil {
		return "", toolFailure(ReasonInsmodFailed, r, strings.Join(load, " "))
	}
	got, _ := readOptional(a.hostPath(filepath.Join(moduleSysfs, "version")))
	if got != previous {
		return "", fmt.Errorf("%s loaded tt-kmd %q", strings.Join(load, " "), got)
	}
	now := a.devicesBound()
	if now.count() < before.count() {
		return "", fmt.Errorf("tt-kmd %s loaded again but binds %s, %d before (%s)", previous, now, before.count(), now.missing())
	}
	return fmt.Sprintf("restored tt-kmd %s (%s, as before)", previous, now), nil
}
