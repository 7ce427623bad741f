package fakehost

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Changes a test makes to a running fake host, for situations a host gets
// into after it was created (the sim's nodes are created once).

// SetModulePolicy sets the kernel's module-loading policy as Spec's
// Lockdown, SigEnforce and ModulesDisabled describe it.
func SetModulePolicy(root string, s Spec) error { return createModulePolicy(root, s) }

// InstallHeaders adds the kernel build tree for kernel, Debian's layout
// when debian (its .kernelvariables names gcc-12), with make and gcc-12.
func InstallHeaders(root, kernel string, debian bool) error {
	return createHeaders(root, Spec{Kernel: kernel, KernelHeaders: true, DebianHeaders: debian})
}

// InstallUbuntuHWEHeaders adds an Ubuntu HWE kernel's build tree for
// kernel (Spec.UbuntuHWEHeaders), with make, gcc-11 as the default gcc,
// and gcc-12 only when withCompiler.
func InstallUbuntuHWEHeaders(root, kernel string, withCompiler bool) error {
	if err := createHeaders(root, Spec{Kernel: kernel, KernelHeaders: true, UbuntuHWEHeaders: true}); err != nil {
		return err
	}
	if withCompiler {
		return nil
	}
	for _, f := range []string{"usr/bin/gcc-12", "usr/bin/" + ubuntuHWECompiler} {
		if err := os.Remove(filepath.Join(root, f)); err != nil {
			return err
		}
	}
	return nil
}

// PullCards models every Tenstorrent card gone from the bus (removed, or
// fallen off it): no PCI function, no device node, nothing for tt-smi.
func PullCards(root string) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	dirs, _ := filepath.Glob(filepath.Join(root, pciDir, "*"))
	for _, d := range dirs {
		if v, _ := readTrim(filepath.Join(d, "vendor")); v == vendorTenstorrent {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{devDir, classDir} {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return err
		}
	}
	st.Devices = nil
	return saveState(root, st)
}

// SetBrokenBuild makes `make modules` fail as with a compiler mismatch
// (Spec.BrokenBuild), or build again.
func SetBrokenBuild(root string, broken bool) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.BrokenBuild = broken
	return saveState(root, st)
}

// SetDelays sets how long `make modules` and a module load take from now
// on (Spec.BuildDelay, Spec.LoadDelay): one fleet timed at two paces.
func SetDelays(root string, build, load time.Duration) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.BuildDelay, st.LoadDelay = build, load
	return saveState(root, st)
}

// SetUnresolved makes the kernel refuse the module of each version with
// "Unknown symbol in module" (Spec.UnresolvedKMD): built against another
// tree than the running kernel's. None: every version loads again.
func SetUnresolved(root string, versions ...string) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.UnresolvedKMD = versions
	return saveState(root, st)
}

// TrustCerts sets the certificates (PEM or DER) the kernel trusts for
// module signatures (Spec.TrustedCerts): an admin enrolled them as MOKs.
func TrustCerts(root string, certs ...[]byte) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.TrustedCerts = nil
	for _, b := range certs {
		cs, err := ParseCertificates(b)
		if err != nil {
			return err
		}
		for _, c := range cs {
			st.TrustedCerts = append(st.TrustedCerts, c.Raw)
		}
	}
	return saveState(root, st)
}

// CheckModuleSignature is the fake kernel's signature check of a module
// file's bytes against the certificates (PEM or DER) it trusts: nil when
// one of them signed it.
func CheckModuleSignature(module []byte, trusted ...[]byte) error {
	var certs []*x509.Certificate
	for _, b := range trusted {
		cs, err := ParseCertificates(b)
		if err != nil {
			return err
		}
		certs = append(certs, cs...)
	}
	return checkModuleSig(module, certs)
}

// FailProbe makes tt-kmd versions' PCI probe of card index fail
// (Device.ProbeFailsOn): loading one of them binds the other cards only.
func FailProbe(root string, index int, versions ...string) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	if index < 0 || index >= len(st.Devices) {
		return fmt.Errorf("fakehost: no card %d (the host has %d)", index, len(st.Devices))
	}
	st.Devices[index].ProbeFailsOn = append(st.Devices[index].ProbeFailsOn, versions...)
	return saveState(root, st)
}

// BusID is the PCI address of the fake host's card index.
func BusID(index int) string { return busID(index) }

// SetDmaBufExporter renames the exporter of process pid's dma-bufs (their
// fdinfo exp_name), e.g. to a GPU driver's: a dma-buf not tenstorrent's.
func SetDmaBufExporter(root string, pid int, exporter string) error {
	infos, _ := filepath.Glob(filepath.Join(root, "proc", strconv.Itoa(pid), "fdinfo", "*"))
	for _, f := range infos {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		s := strings.Replace(string(b), "exp_name:\t"+moduleName+"\n", "exp_name:\t"+exporter+"\n", 1)
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			return err
		}
	}
	if len(infos) == 0 {
		return fmt.Errorf("fakehost: process %d has no dma-buf", pid)
	}
	return nil
}

// KillNextFlash makes the next tt-flash die after writing the SPI and
// before its reset: the flash reached the SPI, the cards run the old image.
func KillNextFlash(root string) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.FlashKilledAfterWrite = true
	return saveState(root, st)
}

// SetFirmware makes card index (-1: every card) run and hold in its SPI
// version, as tt-smi and sysfs print it: "80.17.2.0" (the scheme before 18),
// "255.255.255.255" (a Galaxy chip that reports no bundle version).
func SetFirmware(root string, index int, version string) error {
	st, err := changeCards(root, index, func(d *Device) { d.Firmware, d.SPI = version, "" })
	if err != nil {
		return err
	}
	return renderDeviceAttrs(root, st, boundDevices(st, loadedVersion(root)))
}

// SetBoard makes card index another board (its PCI device id follows: a
// p150 is a Blackhole, 0xb140), as if it had been swapped for one the
// loaded module drives the same way.
func SetBoard(root string, index int, board string) error {
	st, err := changeCards(root, index, func(d *Device) { d.Board = board })
	if err != nil {
		return err
	}
	for i, d := range st.Devices {
		if index < 0 || i == index {
			if err := writeFile(filepath.Join(root, pciDir, busID(i), "device"), d.pciDevice()+"\n"); err != nil {
				return err
			}
		}
	}
	return renderDeviceAttrs(root, st, boundDevices(st, loadedVersion(root)))
}

// SetSilent makes card index (-1: every card) stop answering (Device.Silent),
// or answer again: its firmware hangs, or is fixed.
func SetSilent(root string, index int, silent bool) error {
	st, err := changeCards(root, index, func(d *Device) { d.Silent = silent })
	if err != nil {
		return err
	}
	return renderDeviceAttrs(root, st, boundDevices(st, loadedVersion(root)))
}

// SetBootsSilent makes the image in card index's SPI (-1: every card) not
// start, so the next reset leaves the card Silent (Device.BootsSilent);
// set back, it stands for the power cycle that brought the card back
// (fixed, it runs what its SPI holds).
func SetBootsSilent(root string, index int, silent bool) error {
	st, err := changeCards(root, index, func(d *Device) {
		d.BootsSilent = silent
		if !silent && d.Silent {
			d.Silent = false
			d.boot()
		}
	})
	if err != nil {
		return err
	}
	return renderDeviceAttrs(root, st, boundDevices(st, loadedVersion(root)))
}

func anySilent(st *state) bool {
	for _, d := range st.Devices {
		if d.Silent {
			return true
		}
	}
	return false
}

// SetFailFlash makes tt-flash fail (a verify mismatch) on card index of
// root's host, or every card for index < 0, until set back: a flash that
// fails after the cordon, for tests of what a failed node does to a roll.
func SetFailFlash(root string, index int, fail bool) error {
	_, err := changeCards(root, index, func(d *Device) { d.FailFlash = fail })
	return err
}

// SetSPIVerifyFails makes tt-flash's SPI write to card index of root's
// host (index < 0: every card) fail both verifications, until set back:
// the failure tt-flash says needs a person (ttflash.FailureSource).
func SetSPIVerifyFails(root string, index int, fail bool) error {
	_, err := changeCards(root, index, func(d *Device) {
		// Set back, it stands for the fix support made to the board.
		d.SPIVerifyFails, d.SPIFailed = fail, d.SPIFailed && fail
	})
	return err
}

// changeCards applies change to card index of root's host (index < 0:
// every card) and saves the host's state.
func changeCards(root string, index int, change func(*Device)) (*state, error) {
	st, err := loadState(root)
	if err != nil {
		return nil, err
	}
	if index >= len(st.Devices) {
		return nil, fmt.Errorf("fakehost: no card %d (the host has %d)", index, len(st.Devices))
	}
	for i := range st.Devices {
		if index < 0 || i == index {
			change(&st.Devices[i])
		}
	}
	return st, saveState(root, st)
}

// Package managers a host's tt-smi can come from (InstallPackagedTTSMI).
const (
	PackagedByDpkg = "dpkg"
	PackagedByPip  = "pip"
)

// InstallPackagedTTSMI installs tt-smi version on root's host the way a
// package manager does (tenstorrent/tt-smi ships a Debian package and a
// PyPI one): dpkg puts /usr/bin/tt-smi and lists it in
// /var/lib/dpkg/info/tt-smi.list (debian/control: Architecture all, so no
// ":arch" in the name); a system pip puts the console script
// (pyproject.toml [project.scripts]) at /usr/local/bin/tt-smi and lists it
// in its dist-info RECORD, relative to site-packages.
func InstallPackagedTTSMI(root, manager, version string) error {
	var bin string
	var files map[string]string
	switch manager {
	case PackagedByDpkg:
		bin = "usr/bin/tt-smi"
		files = map[string]string{"var/lib/dpkg/info/tt-smi.list": "/.\n/usr\n/usr/bin\n/usr/bin/tt-smi\n/usr/share/doc/tt-smi\n"}
	case PackagedByPip:
		bin = hostSMIPath
		files = map[string]string{"usr/local/lib/python3.11/dist-packages/tt_smi-" + version + ".dist-info/RECORD": "" +
			"../../../bin/tt-smi,sha256=x,100\ntt_smi/__init__.py,sha256=y,10\ntt_smi-" + version + ".dist-info/RECORD,,\n"}
	default:
		return fmt.Errorf("fakehost: no package manager %q", manager)
	}
	if err := WriteTTSMIBinaryFor(filepath.Join(root, bin), version, hostGlibc(root)); err != nil {
		return err
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}
