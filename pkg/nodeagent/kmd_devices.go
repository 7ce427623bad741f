package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// pciVendorTenstorrent is Tenstorrent's PCI vendor id (tt-kmd's id table).
const pciVendorTenstorrent = "0x1e52"

// binding is which Tenstorrent PCI functions a loaded module bound: the
// driver core links <function>/driver to the driver it bound, and tt-kmd
// makes /dev/tenstorrent/<ordinal> per bound card. A card whose probe
// failed (or that the module's id table lacks) is present but unbound;
// the module loads all the same.
type binding struct {
	present []string // PCI addresses, sorted
	bound   []string // those bound to tenstorrent
	nodes   int      // /dev/tenstorrent/<N>
}

func (a *Agent) devicesBound() binding {
	var b binding
	devs, _ := filepath.Glob(a.hostPath("sys/bus/pci/devices/*"))
	for _, d := range devs {
		if v, _ := readTrimmed(filepath.Join(d, "vendor")); v != pciVendorTenstorrent {
			continue
		}
		b.present = append(b.present, filepath.Base(d))
		if drv, err := os.Readlink(filepath.Join(d, "driver")); err == nil && filepath.Base(drv) == kmdModuleName {
			b.bound = append(b.bound, filepath.Base(d))
		}
	}
	sort.Strings(b.present)
	nodes, _ := os.ReadDir(a.hostPath("dev/tenstorrent"))
	for _, n := range nodes {
		if _, err := strconv.Atoi(n.Name()); err == nil {
			b.nodes++
		}
	}
	return b
}

// count is how many cards the module serves: bound and with a device node.
func (b binding) count() int { return min(len(b.bound), b.nodes) }

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
	return fmt.Sprintf("all bound, but only %d /dev/tenstorrent node(s)", b.nodes)
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
